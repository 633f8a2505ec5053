"""The environment variables a recipe may set: names that only configure the job's own program.

A recipe author is not trusted, and a recipe's ``env`` comes last in every worker's environment. So names
that load code into a process or change what runs are refused (compared upper-cased): the dynamic loader's
and libc's hooks, interpreters' and shells' start-up hooks, where the job's programs are found, the traffic
and trust settings of its TLS and HTTP clients, and the provider's own variables.
"""

from __future__ import annotations

# (prefix, why): every name starting with it is refused
REFUSED_PREFIXES = (
    ("LD_", "the dynamic loader's (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT load code)"),
    ("DYLD_", "the dynamic loader's"),
    ("GLIBC_", "libc's tunables"),
    ("MALLOC_", "libc's allocator hooks"),
    ("PYTHON", "the Python interpreter's (PYTHONPATH, PYTHONSTARTUP, PYTHONHOME run or load code)"),
    ("PERL5", "Perl's start-up hooks"),
    ("PERLLIB", "Perl's start-up hooks"),
    ("RUBY", "Ruby's start-up hooks"),
    ("BASH_FUNC_", "a shell function bash imports"),
    ("AIRFLOW", "Airflow's and this provider's own (AIRFLOW__*, AIRFLOW_ML_*)"),
)
# name -> why
REFUSED_NAMES = {
    **dict.fromkeys(("GCONV_PATH", "LOCPATH", "NLSPATH"), "libc's, which load code or data from that path"),
    **dict.fromkeys(("HOSTALIASES", "RES_OPTIONS", "LOCALDOMAIN"), "libc's name resolution"),
    **dict.fromkeys(("BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "IFS", "CDPATH"),
                    "a shell's start-up hooks"),
    **dict.fromkeys(("NODE_OPTIONS", "NODE_PATH", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS"),
                    "an interpreter's start-up hooks"),
    **dict.fromkeys(("OPENSSL_CONF", "OPENSSL_ENGINES", "OPENSSL_MODULES"), "OpenSSL's, which load code"),
    **dict.fromkeys(("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "HTTP_PROXY",
                     "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"), "where the job's HTTP and TLS traffic goes, and whom it trusts"),
    **dict.fromkeys(("PATH", "HOME", "VIRTUAL_ENV"), "where the job's programs and settings are found"),
}


def env_name_problem(name: str) -> str | None:
    """Why a recipe may not set ``name`` (None: it may)."""
    upper = name.upper()
    why = REFUSED_NAMES.get(upper) or next((why for prefix, why in REFUSED_PREFIXES if upper.startswith(prefix)), None)
    return f"a recipe may not set this variable: it is {why}" if why else None
