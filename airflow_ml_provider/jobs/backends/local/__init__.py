"""The local backend: jobs as sandboxed processes on this machine (``backend``), the launcher that owns each
job's processes (``launcher``), their records (``common``), output (``output``) and sandbox (``sandbox``)."""
