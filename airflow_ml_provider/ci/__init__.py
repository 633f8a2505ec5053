"""``airflow-ml check``: what CI verifies before a DAGs folder is deployed (DAG files import as the DAG
processor loads them, every job spec builds with the DAG's default Params, every job renders for its
backend, recipes validate; optionally every manifest is dry-run on the cluster's API server)."""
