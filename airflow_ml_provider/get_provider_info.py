"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""

from airflow_ml_provider import __version__


def get_provider_info() -> dict:
    return {
        "package-name": "airflow-ml-provider",
        "name": "ML Training",
        "description": "Distributed Horovod and LightGBM training on local processes, Kubeflow MPIJob, "
        "Volcano and Kubernetes Indexed Jobs.",
        "versions": [__version__],
        "integrations": [
            {"integration-name": "ML Training", "external-doc-url": "https://github.com/apache/airflow",
             "tags": ["software"]},
        ],
        "hooks": [
            {"integration-name": "ML Training",
             "python-modules": ["airflow_ml_provider.hooks.training_backend",
                                "airflow_ml_provider.hooks.elasticsearch_logs",
                                "airflow_ml_provider.hooks.model_registry"]},
        ],
        "operators": [
            {"integration-name": "ML Training", "python-modules": ["airflow_ml_provider.operators.training",
                                                                  "airflow_ml_provider.operators.search",
                                                                  "airflow_ml_provider.operators.preprocess",
                                                                  "airflow_ml_provider.operators.evaluate",
                                                                  "airflow_ml_provider.operators.gate",
                                                                  "airflow_ml_provider.operators.deploy",
                                                                  "airflow_ml_provider.operators.recipe"]},
        ],
        "sensors": [
            {"integration-name": "ML Training", "python-modules": ["airflow_ml_provider.sensors.training_job",
                                                                  "airflow_ml_provider.sensors.elasticsearch_log"]},
        ],
        "triggers": [
            {"integration-name": "ML Training", "python-modules": ["airflow_ml_provider.triggers.training_job",
                                                                  "airflow_ml_provider.triggers.elasticsearch_log"]},
        ],
        "connection-types": [
            {
                "connection-type": "ml_training",
                "hook-class-name": "airflow_ml_provider.hooks.training_backend.TrainingBackendHook",
                "ui-field-behaviour": {
                    "hidden-fields": ["host", "schema", "login", "password", "port"],
                    "relabeling": {},
                    "placeholders": {
                        "extra": '{"backend": "local", "local_root": "/data/ml", "local_image": "/opt/venvs/train"}'
                    },
                },
                "conn-fields": {
                    "backend": {
                        "label": "Default backend",
                        "schema": {"type": ["string", "null"],
                                   "enum": ["local", "mpijob", "volcano", "indexed-job", None]},
                    },
                    "local_root": {"label": "Local backend: jobs and artifacts directory",
                                   "schema": {"type": ["string", "null"]}},
                    "local_image": {"label": "Local backend: training Python environment",
                                    "schema": {"type": ["string", "null"]}},
                    "namespace": {"label": "Kubernetes backends: namespace", "schema": {"type": ["string", "null"]}},
                    "kubernetes_conn_id": {"label": "Kubernetes backends: cncf-kubernetes connection id",
                                           "schema": {"type": ["string", "null"]}},
                },
            },
            {
                "connection-type": "ml_registry",
                "hook-class-name": "airflow_ml_provider.hooks.model_registry.ModelRegistryHook",
                "ui-field-behaviour": {
                    "hidden-fields": [],
                    "relabeling": {"host": "Tracking URI or host", "login": "Username", "password": "Password"},
                    "placeholders": {"host": "http://mlflow:5000 (no connection: embedded SQLite registry)",
                                     "extra": '{"registry_uri": "...", "artifact_root": "s3://bucket/mlflow"}'},
                },
                "conn-fields": {
                    "registry_uri": {"label": "Registry URI (default: the tracking URI)",
                                     "schema": {"type": ["string", "null"]}},
                    "artifact_root": {"label": "Artifact root for new experiments",
                                      "schema": {"type": ["string", "null"]}},
                    "token": {"label": "Token (MLFLOW_TRACKING_TOKEN)", "schema": {"type": ["string", "null"]},
                              "sensitive": True},
                    "ui_url": {"label": "MLflow UI URL for links", "schema": {"type": ["string", "null"]}},
                },
            },
        ],
        "extra-links": [
            "airflow_ml_provider.operators.links.MLflowModelVersionLink",
            "airflow_ml_provider.operators.links.KibanaJobLink",
            "airflow_ml_provider.operators.links.GrafanaJobLink",
        ],
    }
