"""Hostile recipes (a recipe author is not trusted): each is refused as ``file:line: path: message`` without
running, rendering or expanding anything, or its values reach the job as literal argv data.

Issue 12, item 6: a 600-byte alias bomb ran until killed, 20k-deep nesting raised RecursionError, a
non-UTF-8 file raised UnicodeDecodeError; item 7: a NUL byte passed ``airflow-ml validate``.
The timeout marks only stop a hang (the old behaviour); the tests assert outcomes, not durations.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from airflow_ml_provider.cli import main
from airflow_ml_provider.recipes import RecipeError, load_recipe, parse_recipe

HEAD = "version: 1\nname: hostile\n"


def _experiment(body: str) -> str:
    return HEAD + "experiments:\n  a:\n" + textwrap.indent(textwrap.dedent(body), "    ")


def _billion_laughs() -> str:
    """Ten strings, then eight levels of ten aliases to the level below: 10^9 values once expanded."""
    text = HEAD + 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for previous, level in zip("abcdefgh", "bcdefghi"):
        text += f"{level}: &{level} [{', '.join([f'*{previous}'] * 10)}]\n"
    return text + "experiments: {x: {framework: generic, command: [python, '{{p}}'], parameters: {p: *i}}}\n"


# (case, file content (str: UTF-8; bytes: as is), line, YAML path, message fragment)
REFUSED = [
    ("alias_bomb", _billion_laughs(), 7, "e", "expands to more than 100000 values"),
    ("alias_bomb_inside_a_parameter", HEAD + "x: &x [" + ",".join(["1"] * 400) + "]\n"
     "experiments:\n  a:\n    framework: generic\n    command: [python, '{{p}}']\n    parameters:\n      p: ["
     + ",".join(["*x"] * 400) + "]\n", 9, "experiments.a.parameters.p", "expands to more than 100000 values"),
    ("deep_flow_sequences", HEAD + "experiments: " + "[" * 20000 + "]" * 20000 + "\n", 3,
     "experiments[0][0][0][0][0][0][0][0][0][0][0]...", "nested deeper than 64 levels"),
    ("deep_flow_mappings", HEAD + "experiments: " + "{a: " * 20000 + "1" + "}" * 20000 + "\n", 3,
     "experiments.a.a.a.a.a.a.a.a.a.a.a...", "nested deeper than 64 levels"),
    ("deep_block_sequences", HEAD + "experiments:\n" + "- " * 20000 + "x\n", 4,
     "experiments[0][0][0][0][0][0][0][0][0][0][0]...", "nested deeper than 64 levels"),
    ("deep_complex_keys", HEAD + "experiments:\n  " + "? " * 20000 + "a: 1\n", 4, "experiments",
     "nested deeper than 64 levels"),
    ("recursive_alias", HEAD + "experiments: &e\n  a: *e\n", 4, "experiments.a",
     "an alias refers to a node that contains it"),
    ("latin1_byte", HEAD.encode() + "description: caf\xe9\n".encode("latin-1"), 3, "",
     "not UTF-8 text: byte 0xe9 cannot be decoded"),
    ("utf16_file", (HEAD + "experiments: {}\n").encode("utf-16"), 1, "", "not UTF-8 text: byte 0xff"),
    ("raw_nul_byte", HEAD.encode() + b"description: a\x00b\n", 3, "",
     "special characters are not allowed: character #x0000"),
    ("escaped_nul_in_argv", _experiment('framework: generic\ncommand: [python, "a\\0b"]\n'), 6,
     "experiments.a.command[1]", "contains a NUL character"),
    ("escaped_nul_in_a_value", _experiment('framework: generic\ncommand: [python, "{{p}}"]\n'
                                           'parameters: {p: ["ok", "x\\0y"]}\n'), 7,
     "experiments.a.parameters.p[1]", "contains a NUL character"),
    ("escaped_nul_in_env", _experiment('framework: generic\ncommand: [python]\nenv: {A: "\\0"}\n'), 7,
     "experiments.a.env.A", "contains a NUL character"),
    ("escaped_nul_in_image", _experiment('image: "img\\0"\ncommand: [python]\n'), 5,
     "experiments.a.image", "contains a NUL character"),
    ("integer_of_5000_digits", _experiment("framework: generic\ncommand: [python]\nworkers: " + "9" * 5000 + "\n"),
     7, "experiments.a.workers", "an integer of 5000 digits is out of range"),
    ("python_object_tag", _experiment('framework: generic\ncommand: !!python/object/apply:os.system '
                                      '["touch /tmp/aml-recipe-python-tag"]\n'), 6, "experiments.a.command",
     "could not determine a constructor for the tag 'tag:yaml.org,2002:python/object/apply:os.system'"),
    ("python_name_tag", _experiment("framework: generic\ncommand: [!!python/name:os.system x]\n"), 6,
     "experiments.a.command[0]",
     "could not determine a constructor for the tag 'tag:yaml.org,2002:python/name:os.system'"),
    ("workers_beyond_the_bound", _experiment("framework: generic\ncommand: [python]\nworkers: 1000000000\n"),
     7, "experiments.a.workers", "less than or equal to 512"),
    ("samples_beyond_the_bound", _experiment("framework: generic\ncommand: [python]\nsamples: 1000000000\n"),
     7, "experiments.a.samples", "less than or equal to 10000"),
    ("objective_is_jinja", _experiment("framework: generic\ncommand: [python, '{{p}}']\nsamples: 2\n"
                                       "parameters: {p: [1, 2]}\nsearch: {objective: '{{ 7*7 }}'}\n"),
     9, "experiments.a.search.objective", "is not a valid metric name"),
    ("nan_range_bound", _experiment("framework: generic\ncommand: [python, '{{p}}']\nparameters: "
                                    "{p: {min: .nan, max: 1}}\n"), 7, "experiments.a.parameters.p.min",
     "must be a finite number"),
    ("infinite_range_bound", _experiment("framework: generic\ncommand: [python, '{{p}}']\nparameters: "
                                         "{p: {min: 0, max: .inf}}\n"), 7, "experiments.a.parameters.p.max",
     "must be a finite number"),
    ("infinite_choice", _experiment("framework: generic\ncommand: [python, '{{p}}']\nparameters: {p: [1, -.inf]}\n"),
     7, "experiments.a.parameters.p[1]", "must be a finite number"),
    ("command_is_a_shell_string", _experiment("framework: generic\ncommand: 'python train.py; rm -rf /'\n"), 6,
     "experiments.a.command", "not a shell string"),
    ("program_with_shell_syntax", _experiment("framework: generic\ncommand: ['python;id', x]\n"), 4,
     "experiments.a", "contains shell syntax"),
    ("jinja_statement_in_argv", _experiment("framework: generic\ncommand: [python, '{% for x in y %}']\n"), 6,
     "experiments.a.command[1]", "Jinja statements and comments"),
    ("jinja_expression_placeholder", _experiment("framework: generic\ncommand: [python, '{{ lr * 2 }}']\n"
                                                 "parameters: {lr: [1, 2]}\n"), 6, "experiments.a.command[1]",
     "expressions are never evaluated"),
    ("airflow_context_placeholder", _experiment("framework: generic\ncommand: [python, '{{ var.value.x }}']\n"), 6,
     "experiments.a.command[1]", "a {{...}} that is not a placeholder"),
    ("env_name_with_equals", _experiment("framework: generic\ncommand: [python]\nenv: {'A=B': x}\n"), 7,
     "experiments.a.env.A=B", "not a valid environment variable name"),
    # Issue 38: env names that load code or change what runs (a recipe's env comes last in a worker's environment)
    *((f"env_{name.lower()}", HEAD + f"experiments:\n  sweep:\n    framework: generic\n    command: [python]\n"
                              f"    env: {{{name}: x}}\n", 7, f"experiments.sweep.env.{name}",
       f"a recipe may not set this variable: it is {why}")
      for name, why in [
          ("LD_PRELOAD", "the dynamic loader's"), ("LD_LIBRARY_PATH", "the dynamic loader's"),
          ("ld_audit", "the dynamic loader's"), ("DYLD_INSERT_LIBRARIES", "the dynamic loader's"),
          ("GLIBC_TUNABLES", "libc's tunables"), ("MALLOC_CHECK_", "libc's allocator hooks"),
          ("GCONV_PATH", "libc's, which load code"), ("PYTHONPATH", "the Python interpreter's"),
          ("PYTHONSTARTUP", "the Python interpreter's"), ("PYTHONHOME", "the Python interpreter's"),
          ("AIRFLOW__CORE__FERNET_KEY", "Airflow's and this provider's own"),
          ("AIRFLOW_ML_MODEL_DIR", "Airflow's and this provider's own"), ("PERL5OPT", "Perl's start-up hooks"),
          ("RUBYOPT", "Ruby's start-up hooks"), ("NODE_OPTIONS", "an interpreter's start-up hooks"),
          ("JAVA_TOOL_OPTIONS", "an interpreter's start-up hooks"), ("BASH_ENV", "a shell's start-up hooks"),
          ("ENV", "a shell's start-up hooks"), ("BASH_FUNC_python", "a shell function bash imports"),
          ("OPENSSL_CONF", "OpenSSL's, which load code"), ("HTTPS_PROXY", "where the job's HTTP and TLS traffic"),
          ("PATH", "where the job's programs and settings are found"),
      ]),
    ("recipe_name_with_a_path", HEAD.replace("hostile", "../../dags/x") + "experiments: {}\n", 2, "name",
     "is not a valid recipe name"),
    ("experiment_name_with_a_path", HEAD + "experiments:\n  ../x:\n    framework: generic\n    command: [python]\n",
     4, "experiments.../x", "is not a valid experiment name"),
    ("gpu_type_with_a_path", _experiment("framework: generic\ncommand: [python]\n"
                                         "hardware: {gpu: {type: ../../x, count: 1}}\n"), 7,
     "experiments.a.hardware.gpu.type", "is not a valid GPU type"),
    ("memory_with_a_command", _experiment("framework: generic\ncommand: [python]\nhardware: {memory: '1Gi; id'}\n"),
     7, "experiments.a.hardware.memory", "String should match pattern"),
    ("unknown_backend", _experiment("framework: generic\ncommand: [python]\nbackend: ../../x\n"), 7,
     "experiments.a.backend", "Input should be"),
    ("duplicate_key_override", _experiment("framework: generic\ncommand: [python]\ncommand: [sh]\n"), 7,
     "experiments.a.command", "duplicate key 'command'"),
    ("dunder_field", _experiment("framework: generic\ncommand: [python]\n__class__: x\n"), 7,
     "experiments.a.__class__", "unknown field '__class__'"),
    # spot pools: node labels and taints as Kubernetes checks them, bounded; nothing else of the pods
    ("node_selector_value_with_a_command", _experiment("framework: generic\ncommand: [python]\n"
                                                       "kubernetes: {node_selector: {pool: 'spot; id'}}\n"), 7,
     "experiments.a.kubernetes.node_selector.pool", "String should match pattern"),
    ("node_selector_key_with_a_path", _experiment("framework: generic\ncommand: [python]\n"
                                                  "kubernetes: {node_selector: {'../x': spot}}\n"), 7,
     "experiments.a.kubernetes.node_selector.../x", "String should match pattern"),
    ("node_selector_value_not_a_string", _experiment("framework: generic\ncommand: [python]\n"
                                                     "kubernetes: {node_selector: {cloud.google.com/gke-spot: true}}\n"),
     7, "experiments.a.kubernetes.node_selector.cloud.google.com/gke-spot", "Input should be a valid string"),
    ("node_selector_of_33_labels", _experiment("framework: generic\ncommand: [python]\nkubernetes: {node_selector: {"
                                               + ", ".join(f"k{i}: v" for i in range(33)) + "}}\n"), 7,
     "experiments.a.kubernetes.node_selector", "at most 32 items"),
    ("toleration_operator_outside_the_enum", _experiment("framework: generic\ncommand: [python]\n"
                                                         "kubernetes: {tolerations: [{key: spot, operator: Gt}]}\n"),
     7, "experiments.a.kubernetes.tolerations[0].operator", "Input should be 'Exists' or 'Equal'"),
    ("toleration_effect_outside_the_enum", _experiment("framework: generic\ncommand: [python]\n"
                                                       "kubernetes: {tolerations: [{key: spot, effect: Evict}]}\n"),
     7, "experiments.a.kubernetes.tolerations[0].effect", "Input should be 'NoSchedule'"),
    ("toleration_of_every_taint_with_a_value", _experiment("framework: generic\ncommand: [python]\nkubernetes: "
                                                           "{tolerations: [{operator: Exists, value: x}]}\n"), 7,
     "experiments.a.kubernetes.tolerations[0]", "takes no value"),
    ("toleration_seconds_beyond_the_bound", _experiment("framework: generic\ncommand: [python]\nkubernetes: "
                                                        "{tolerations: [{key: spot, effect: NoExecute, "
                                                        "toleration_seconds: 99999999999}]}\n"), 7,
     "experiments.a.kubernetes.tolerations[0].toleration_seconds", "less than or equal to 604800"),
    ("tolerations_of_33_taints", _experiment("framework: generic\ncommand: [python]\nkubernetes: {tolerations: ["
                                             + ", ".join("{key: k, operator: Exists}" for _ in range(33)) + "]}\n"),
     7, "experiments.a.kubernetes.tolerations", "at most 32 items"),
    ("pod_field_a_recipe_may_not_set", _experiment("framework: generic\ncommand: [python]\n"
                                                   "kubernetes: {service_account: admin}\n"), 7,
     "experiments.a.kubernetes.service_account", "unknown field 'service_account'"),
]


def test_environment_variables_that_only_configure_the_program_are_accepted():
    recipe = parse_recipe(_experiment("framework: generic\ncommand: [python]\nenv: {OMP_NUM_THREADS: '2', "
                                      "NCCL_DEBUG: INFO, TF_CPP_MIN_LOG_LEVEL: '2', MY_FLAG: x, PYTORCH_ALLOC: y}\n"))
    assert set(recipe.experiments["a"].env) == {"OMP_NUM_THREADS", "NCCL_DEBUG", "TF_CPP_MIN_LOG_LEVEL", "MY_FLAG",
                                                "PYTORCH_ALLOC"}


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("content", "line", "path", "message"), [case[1:] for case in REFUSED],
                         ids=[case[0] for case in REFUSED])
def test_hostile_recipe_is_refused_at_its_line_and_path(tmp_path, content, line, path, message):
    recipe = tmp_path / "hostile.yaml"
    recipe.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(RecipeError) as raised:
        load_recipe(recipe)
    matching = [issue for issue in raised.value.issues if issue.path == path and message in issue.message]
    assert matching, str(raised.value)[:2000]
    assert matching[0].line == line
    assert f"{recipe}:{line}: {path or '<document>'}: " in str(raised.value)
    assert not Path("/tmp/aml-recipe-python-tag").exists()


def test_a_file_over_one_mebibyte_is_refused_before_parsing(tmp_path):
    recipe = tmp_path / "big.yaml"
    recipe.write_text(HEAD + "description: " + "x" * (1 << 20) + "\n")
    with pytest.raises(RecipeError, match=r"big.yaml:1: <document>: the file is larger than 1048576 bytes"):
        load_recipe(recipe)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", ["alias_bomb", "raw_nul_byte", "escaped_nul_in_argv", "latin1_byte"])
def test_airflow_ml_validate_refuses_them_with_exit_status_1(tmp_path, capsys, case):
    content = dict((c[0], c[1]) for c in REFUSED)[case]
    recipe = tmp_path / f"{case}.yaml"
    recipe.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert main(["validate", str(recipe)]) == 1
    assert capsys.readouterr().err.startswith(f"{recipe}:")


# (case, value): each reaches the program as exactly these characters, in one argv element
LITERAL = [
    ("shell_separator", "; touch /tmp/aml-recipe-literal"),
    ("command_substitution", "$(touch /tmp/aml-recipe-literal)"),
    ("backticks", "`touch /tmp/aml-recipe-literal`"),
    ("jinja_expression", "{{ 7 * 7 }}"),
    ("jinja_context_lookup", "{{ var.value.secret }}"),
    ("jinja_raw_block", "{% raw %}$HOME"),
    ("a_placeholder_of_another_parameter", "{{other}}"),
    ("newline_and_tab", "a\nb\tc"),
    ("option_like_value", "--config=/etc/shadow"),
    ("bidi_override", "abc\u202edcba"),
]


@pytest.mark.parametrize("value", [case[1] for case in LITERAL], ids=[case[0] for case in LITERAL])
def test_hostile_values_reach_argv_literally_once(value):
    recipe = parse_recipe(_experiment("framework: generic\ncommand: [python, -m, prog, '--v={{v}}', '{{other}}']\n"
                                      "parameters:\n  v: [x]\n  other: [y]\n").replace("[x]", _yaml_string(value)))
    (trial,) = recipe.trials("a")
    assert trial.argv == ["python", "-m", "prog", f"--v={value}", "y"]
    assert trial.params == {"v": value, "other": "y"}
    assert not Path("/tmp/aml-recipe-literal").exists()


def _yaml_string(value: str) -> str:
    import json

    return "[" + json.dumps(value) + "]"  # a JSON string is a YAML double-quoted scalar


# Issue 19 L2: symlinked recipe files were followed and their content echoed in the placeholder DAG's docs
# (every /etc/shadow line, a kubeconfig token); a FIFO hung `airflow-ml validate`.
SECRET = "ghp_FAKEtoken0123456789abcdefXYZ"
GOOD = HEAD.replace("hostile", "outside") + "experiments: {a: {framework: generic, command: [python]}}\n"


@pytest.fixture
def recipes_with_links(tmp_path):
    """A recipes folder whose files point elsewhere: a valid recipe outside holding a secret, /etc/shadow,
    a FIFO (directly, and through a link), a folder named like a recipe."""
    import os

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.yaml").write_text(f"# {SECRET}\n" + GOOD)
    os.mkfifo(outside / "pipe")
    folder = tmp_path / "recipes"
    folder.mkdir()
    (folder / "outside.yaml").symlink_to(outside / "secret.yaml")
    (folder / "relative.yaml").symlink_to("../outside/secret.yaml")
    (folder / "shadow.yaml").symlink_to("/etc/shadow")
    (folder / "pipe_link.yaml").symlink_to(outside / "pipe")
    os.mkfifo(folder / "pipe.yaml")
    (folder / "folder.yaml").mkdir()
    return folder


@pytest.mark.timeout(60)  # stops the old hang on a FIFO; the assertions are about outcomes
def test_symlinks_fifos_and_folders_are_refused_unread(recipes_with_links):
    from airflow_ml_provider.recipes.dag import dags_from_folder

    with pytest.warns(UserWarning) as warned:
        dags = dags_from_folder(recipes_with_links)

    link, not_regular = "is a symbolic link", "is not a regular file"
    expected = {"outside": link, "relative": link, "shadow": link, "pipe_link": link, "pipe": not_regular,
                "folder": not_regular}
    assert set(dags) == {f"invalid_recipe_{stem}" for stem in expected}
    shadow = Path("/etc/shadow").read_text().splitlines() if Path("/etc/shadow").is_file() else []
    for stem, rule in expected.items():
        dag = dags[f"invalid_recipe_{stem}"]
        assert f"{recipes_with_links / stem}.yaml:1: <document>: {rule}" in dag.doc_md
        assert SECRET not in dag.doc_md and not any(line and line in dag.doc_md for line in shadow)
    assert not any(SECRET in str(w.message) for w in warned)


@pytest.mark.timeout(60)
def test_airflow_ml_validate_refuses_a_symlink_and_a_fifo_without_hanging(recipes_with_links, capsys):
    files = [str(recipes_with_links / name) for name in ("outside.yaml", "pipe.yaml", "pipe_link.yaml")]
    assert main(["validate", *files]) == 1
    err = capsys.readouterr().err
    assert f"{files[0]}:1: <document>: is a symbolic link" in err and SECRET not in err
    assert f"{files[1]}:1: <document>: is not a regular file" in err


# A bad value that looks like a secret, in each kind of field: refused naming the YAML path and the rule,
# and the value appears neither in the error, the warning, nor the placeholder DAG's docs.
SECRET_VALUES = [
    ("recipe_name", HEAD.replace("hostile", f"{SECRET}!") + "experiments: {a: {framework: generic, command: [x]}}\n",
     "name"),
    ("workers_text", _experiment(f"framework: generic\ncommand: [python]\nworkers: {SECRET}\n"),
     "experiments.a.workers"),
    ("framework", _experiment(f"framework: {SECRET}\ncommand: [python]\n"), "experiments.a.framework"),
    ("memory", _experiment(f"framework: generic\ncommand: [python]\nhardware: {{memory: {SECRET}}}\n"),
     "experiments.a.hardware.memory"),
    ("dependency", _experiment(f"framework: generic\ncommand: [python]\ndepends_on: [{SECRET}]\n"),
     "experiments.a.depends_on[0]"),
    ("repeated_values", _experiment(f"framework: generic\ncommand: [python, '{{{{p}}}}']\n"
                                    f"parameters: {{p: [{SECRET}, {SECRET}]}}\n"), "experiments.a.parameters.p"),
    ("range_bound", _experiment(f"framework: generic\ncommand: [python, '{{{{p}}}}']\n"
                                f"parameters: {{p: {{min: {SECRET}, max: 1}}}}\n"), "experiments.a.parameters.p.min"),
    ("shell_string_command", _experiment(f"framework: generic\ncommand: 'python --token {SECRET}'\n"),
     "experiments.a.command"),
    ("program_with_shell_syntax", _experiment(f"framework: generic\ncommand: ['{SECRET};id']\n"), "experiments.a"),
    ("expression_placeholder", _experiment(f"framework: generic\ncommand: [python, '{{{{ {SECRET}.x }}}}']\n"),
     "experiments.a.command[1]"),
    ("objective", _experiment(f"framework: generic\ncommand: [python, '{{{{p}}}}']\nsamples: 2\n"
                              f"parameters: {{p: [1, 2]}}\nsearch: {{objective: '{SECRET}!'}}\n"),
     "experiments.a.search.objective"),
    ("schedule", HEAD + f"schedule: '{SECRET}'\nexperiments: {{a: {{framework: generic, command: [x]}}}}\n",
     "schedule"),
]


@pytest.mark.parametrize(("content", "path"), [case[1:] for case in SECRET_VALUES],
                         ids=[case[0] for case in SECRET_VALUES])
def test_a_refusal_names_the_path_and_rule_never_the_value(tmp_path, content, path):
    from airflow_ml_provider.recipes.dag import dags_from_folder

    (tmp_path / "leaky.yaml").write_text(content)
    with pytest.raises(RecipeError) as raised:
        load_recipe(tmp_path / "leaky.yaml")
    assert any(issue.path == path for issue in raised.value.issues), str(raised.value)
    assert SECRET not in str(raised.value)
    with pytest.warns(UserWarning) as warned:
        (dag,) = dags_from_folder(tmp_path).values()
    assert f": {path}: " in dag.doc_md and SECRET not in dag.doc_md
    assert all(SECRET not in str(w.message) for w in warned)
