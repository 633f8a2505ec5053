"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""

from airflow_ml_provider import __version__
from airflow_ml_provider.jobs.backends import BACKENDS
from airflow_ml_provider.patterns import DNS_LABEL, DNS_LABEL_MAX, whole

DOCS_URL = "https://github.com/airflow-ml/airflow-ml-provider/blob/main/docs/index.md"  # setup.cfg: Documentation


def _field(label: str, description: str, kind: str = "string", **schema) -> dict:
    """An optional extra field of a connection form (``null``: not set, the documented default)."""
    return {"label": label, "description": description, "schema": {"type": [kind, "null"], **schema}}


# What the Kubernetes backends require of a name they send to the API (kubernetes.rest.dns_label), as a
# JSON schema: the form's input stops at maxLength; a schema validator (an API client) applies the whole
# pattern, the same in ECMAScript and in Python's re.search (where "$" also matches before a final "\n").
_DNS_LABEL_SCHEMA = {"pattern": whole(DNS_LABEL.pattern), "maxLength": DNS_LABEL_MAX}


_TRAINING_FIELDS = {
    "backend": _field(
        "Default backend",
        "Where a task's job runs unless the task names a backend. Empty: local.",
        enum=list(BACKENDS),
        values_display={
            "local": "local: processes on the Airflow worker",
            "mpijob": "mpijob: Kubeflow MPIJob",
            "volcano": "volcano: Volcano Job (gang-scheduled)",
            "indexed-job": "indexed-job: Kubernetes Indexed Job (LightGBM, PyTorch, generic)",
            "trainjob": "trainjob: Kubeflow Trainer v2 TrainJob (PyTorch)",
        },
    ),
    "local_root": _field(
        "Local: jobs directory",
        "Job records and logs of the local backend. Empty: $AIRFLOW_HOME/ml.",
        examples=["/data/ml"],
    ),
    "local_image": _field(
        "Local: training environment",
        "A virtualenv whose bin/python runs the workers (TensorFlow, Horovod, LightGBM). Empty: "
        "$AIRFLOW_ML_LOCAL_IMAGE, else Airflow's own interpreter.",
        examples=["/opt/venvs/train"],
    ),
    "etcd": _field(
        "Local: etcd for elastic slots",
        "URL of the etcd that holds elastic Horovod worker slots. Empty: $AIRFLOW_ML_ETCD.",
        examples=["http://127.0.0.1:2379"],
    ),
    "orphan_grace_s": _field(
        "Local: orphan grace (s)",
        "A local job no task has followed for this long is stopped. Empty: 600.",
        kind="number",
        minimum=1,
    ),
    "local_sandbox": _field(
        "Local: job sandbox",
        "Each local job in a bubblewrap sandbox (its own user, PID and network namespaces, read-only root and "
        "kernel settings, bounded memory and processes, only its own artifact dirs writable, nothing of "
        "$AIRFLOW_HOME or the job records). Empty: required.",
        enum=["auto", "required", "off"],
        values_display={
            "auto": "auto: sandboxed where bubblewrap works, else unsandboxed with a warning",
            "required": "required: refuse to run a local job unsandboxed",
            "off": "off: never (a single-tenant machine)",
        },
    ),
    "kubernetes_conn_id": _field(
        "Kubernetes: connection id",
        "A cncf-kubernetes connection (kubeconfig, in-cluster or context). Empty: kubernetes_default.",
        examples=["kubernetes_default"],
    ),
    "namespace": _field(
        "Kubernetes: namespace",
        "Namespace of the jobs. Empty: the Kubernetes connection's namespace.",
        examples=["training"],
        **_DNS_LABEL_SCHEMA,
    ),
    "gang_scheduler": _field(
        "Kubernetes: MPI gang scheduler",
        "The MPI operator's --gang-scheduling setting, if it has one (e.g. volcano, scheduler-plugins): "
        "lowercase letters, digits and '-'.",
        examples=["volcano"],
        **_DNS_LABEL_SCHEMA,
    ),
    "queueing": _field(
        "Kubernetes: queueing",
        "kueue: Kueue admits the jobs (scheduling.queue is the LocalQueue, scheduling.priority_class the "
        "WorkloadPriorityClass; jobs are created suspended). Empty: no queueing system.",
        enum=["kueue"],
        values_display={"kueue": "kueue: Kueue admits the jobs (created suspended, labelled with their queue)"},
    ),
    "per_index_retries": _field(
        "Kubernetes: per-shard retries",
        "on: the cluster's Job controller retries each shard of an indexed-job sharded job (backoffLimitPerIndex, "
        "Kubernetes 1.29 and later); off: the pods retry their shards. Empty: by the API server's version.",
        enum=["on", "off"],
        values_display={"on": "on: backoffLimitPerIndex (Kubernetes 1.29 and later)",
                        "off": "off: each pod retries its shard"},
    ),
    "training_runtime": _field(
        "Trainer: training runtime",
        "The (Cluster)TrainingRuntime every trainjob TrainJob names. Empty: by framework, airflow-ml-torch "
        "(deploy/kubernetes/trainingruntime.yaml) or airflow-ml-xgboost (trainingruntime-xgboost.yaml).",
        examples=["airflow-ml-torch", "torch-distributed", "xgboost-distributed"],
    ),
    "training_runtime_kind": _field(
        "Trainer: runtime kind",
        "Whether training_runtime is cluster-wide or in the jobs' namespace. Empty: ClusterTrainingRuntime.",
        enum=["ClusterTrainingRuntime", "TrainingRuntime"],
        values_display={"ClusterTrainingRuntime": "ClusterTrainingRuntime: cluster-wide",
                        "TrainingRuntime": "TrainingRuntime: in the jobs' namespace"},
    ),
    "image": _field(
        "Kubernetes: training image",
        "Image of the jobs' pods unless the task or a framework image sets one.",
        examples=["registry.example/train:1.4"],
    ),
    "image_horovod": _field(
        "Kubernetes: Horovod image", "Image for Horovod jobs. Empty: the training image."
    ),
    "image_lightgbm": _field(
        "Kubernetes: LightGBM image", "Image for LightGBM jobs. Empty: the training image."
    ),
    "image_pytorch": _field(
        "Kubernetes: PyTorch image", "Image for PyTorch jobs (torchrun). Empty: the training image."
    ),
    "image_xgboost": _field(
        "Kubernetes: XGBoost image", "Image for XGBoost jobs (their tracker too). Empty: the training image."
    ),
    "image_generic": _field("Kubernetes: generic image", "Image for other jobs. Empty: the training image."),
    "artifact_root": _field(
        "Artifact root",
        "Where jobs keep models, checkpoints and data: a path every worker sees, or s3:// / gs://. "
        "Empty: [ml_training] artifact_root, else the local jobs directory.",
        examples=["s3://ml-artifacts/airflow"],
    ),
    "artifact_conn_id": _field(
        "Artifact store connection id",
        "The aws/google connection for an s3:// or gs:// artifact root.",
        examples=["aws_default"],
    ),
    "artifact_secret_env": _field(
        "Artifact credentials for pods",
        'Worker variables from Kubernetes Secrets, e.g. {"AWS_ACCESS_KEY_ID": {"secret": "s3", "key": "id"}}.',
        kind="object",
    ),
    "data_roots": _field(
        "Data roots",
        "The folders a data_path Param may read from: a JSON list, or comma-separated absolute paths. "
        "Empty: [ml_training] data_roots, else $AIRFLOW_HOME/data and the local jobs directory's data folder.",
        examples=["/data/ml,/srv/datasets"],
    ),
    "elasticsearch_conn_id": _field(
        "Elasticsearch connection id",
        "Read jobs' logs from Elasticsearch (Filebeat) through this connection instead of the backend.",
        examples=["elasticsearch_default"],
    ),
}

_REGISTRY_FIELDS = {
    "registry_uri": _field(
        "Registry URI", "Where models are registered, if not at the tracking URI.", examples=["databricks-uc"]
    ),
    "artifact_root": _field(
        "Artifact root", "Artifact location of new experiments.", examples=["s3://bucket/mlflow"]
    ),
    "token": _field(
        "Token",
        "Bearer token for the tracking server (sent as a request header, never logged).",
        format="password",
    ),
    "promotion_lock": _field(
        "Promotion lock",
        "A tracking server's: where promotions of one model wait for each other, a PostgreSQL or MySQL URL "
        "(e.g. the server's backend store) or a folder every worker mounts. Empty: a SQLite or SQL store's own "
        "lock; for a server, a lock on this machine only.",
        format="password",  # a database URL may hold its password
    ),
    "ui_url": _field(
        "MLflow UI URL",
        "Base URL of the MLflow UI for task links. Empty: the tracking URI when it is http(s).",
        examples=["https://mlflow.example.com"],
    ),
}


def _option(description: str, example: str | None = None, default: str | None = None, kind: str = "string") -> dict:
    """An ``[ml_training]`` option as Airflow's provider schema wants it (None: unset, the code's default)."""
    return {"description": description, "version_added": "0.1.0", "type": kind, "example": example,
            "default": default}


def _bound(description: str, default: int | float | None, example: str, kind: str = "integer") -> dict:
    """A bound on what users may ask for. ``default`` is the code's own fallback, written as a literal since this
    module is read without the package's dependencies (the docs build); tests/unit/test_provider_metadata.py checks."""
    return _option(description, example=example, default=None if default is None else f"{default:g}", kind=kind)


# The [ml_training] section, declared so `airflow config list` shows it; docs/configuration.md is built
# from it. Every option the package reads is here (tests/unit/test_provider_metadata.py checks).
CONFIG = {
    "ml_training": {
        "description": "Settings of the ML training provider that belong to the deployment rather than to a "
        "connection: links to the MLflow, Kibana and Grafana UIs, the search's storage, the pipeline's "
        "notifications, where shared files go, and the bounds on what UI users, recipe authors and "
        "searches may ask for.",
        "options": {
            "artifact_root": _option(
                "Where jobs keep models, checkpoints, data and evaluation files when the ml_training "
                "connection names no artifact_root: a path every worker sees, or s3:// / gs://. Unset: the "
                "local jobs directory ($AIRFLOW_HOME/ml) for local jobs, none on Kubernetes.",
                example="s3://ml-artifacts/airflow",
            ),
            "data_root": _option(
                "Where the shipped pipeline writes its data shards (readable by the jobs). Unset: "
                "<artifact_root>/data.",
                example="/data/ml/pipeline",
            ),
            "mlflow_ui_url": _option(
                "The MLflow UI that task links point to when the embedded registry (no ml_registry "
                "connection) is used and a server serves it (make ui sets it). Unset: no MLflow link (a "
                "registry connection's links go to its ui_url, or its http(s) tracking URI).",
                example="http://mlflow.example.com",
            ),
            "kibana_url_template": _option(
                "A Kibana URL for a job's logs, shown as an extra link on job tasks; {job_name}, {dag_id}, "
                "{task_id}, {run_id}, {map_index} and {try_number} are filled in, URL-quoted. Unset: no link.",
                example="https://kibana.example.com/app/discover#/?_a=(query:(query:'job:{job_name}'))",
            ),
            "grafana_url_template": _option(
                "A Grafana dashboard URL for a job, shown as an extra link on job tasks; the same fields "
                "as kibana_url_template. Unset: no link.",
                example="https://grafana.example.com/d/training?var-job={job_name}",
            ),
            "search_storage_url": _option(
                "The hyperparameter search's Optuna storage: journal:///path, or an SQLAlchemy URL of its own "
                "database (never derived from Airflow's metadata database). Unset: "
                "journal://$AIRFLOW_HOME/ml/search/optuna.journal.",
                example="postgresql://optuna@db/optuna",
            ),
            "notify_http_conn_id": _option(
                "An HTTP connection to a chat webhook (Slack, Teams, Google Chat) that the shipped pipeline "
                "notifies of failed trainings and gate rejections. Unset: no notification.",
                example="chat_webhook",
            ),
            "notify_endpoint": _option(
                "The endpoint on notify_http_conn_id's host that receives {\"text\": message}. Unset: the "
                "connection's own URL.",
                example="/hooks/ml",
            ),
            "data_roots": _option(
                "The folders a data_path Param may read from (comma-separated absolute paths), when the "
                "ml_training connection has no data_roots extra. A path outside them, once symlinks and '..' "
                "are resolved, is refused. Unset: $AIRFLOW_HOME/data and the local jobs directory's data "
                "folder ($AIRFLOW_HOME/ml/data).",
                example="/data/ml,/srv/datasets",
            ),
            "local_images": _option(
                "Further Python environments (comma-separated absolute paths) that an image Param may name on "
                "the local backend, besides the connection's local_image and $AIRFLOW_ML_LOCAL_IMAGE. Any other "
                "path is refused. Unset: only those two.",
                example="/opt/venvs/train,/opt/venvs/train-gpu",
            ),
            "local_max_workers": _bound(
                "The most worker processes one local job may start (num_workers, or an elastic job's "
                "max_workers); a job asking for more is refused at submit. Unset: 4 x the machine's CPU count.",
                None, "8"),
            "local_job_memory_mb": _bound(
                "The memory one sandboxed local job may use, all its processes and its /tmp and /dev/shm together "
                "(a cgroup of its own); past it the kernel kills a process and the job fails naming this limit. "
                "Unset: three quarters of the machine's memory.", None, "16384"),
            "local_job_max_processes": _bound(
                "The most processes and threads one sandboxed local job may have at once (a cgroup of its own, and "
                "RLIMIT_NPROC where no cgroup can be made); a job that reaches it fails naming this limit.",
                4096, "8192"),
            "local_job_tmp_mb": _bound(
                "The size of each sandboxed local job's private /tmp and /dev/shm (tmpfs, charged to its memory).",
                1024, "4096"),
            "local_job_egress": _option(
                "The endpoints (host:port, comma-separated) sandboxed local jobs may reach besides their artifact "
                "store and their elastic discovery store: each job has a network of its own, with only its "
                "loopback; the launcher relays these. A host name is given to the job by its /etc/hosts.",
                example="registry.example.com:443,127.0.0.1:8080"),
            "task_log_max_lines": _bound(
                "The most lines of a job's log one task shows in its task log (each trial's, in a search); "
                "past it, one line says where the job's whole log is (a local job's output.log in its job "
                "directory, the Elasticsearch index, the pods' logs), and metrics, log rules and verdicts still "
                "read every line. A task's own follow option task_log_lines may only lower it.",
                10000, "2000"),
            "max_conf_keys": _bound(
                "The most keys a pipeline run's trigger conf may have; more is refused by its first task.",
                64, "32"),
            "max_conf_bytes": _bound(
                "The largest trigger conf, as JSON in bytes, a pipeline run accepts; more is refused by its "
                "first task.", 65536, "16384"),
            "search_max_parallel": _bound(
                "The most trial jobs one hyperparameter search runs at once (max_parallel; a recipe's "
                "parallel), checked when the DAG is parsed (a recipe's when it is read, airflow-ml validate "
                "included) and when the search starts.", 16, "8"),
            "search_max_trials": _bound(
                "The most trials one hyperparameter search runs (n_trials; a grid without n_trials: its whole "
                "size), checked when the DAG is parsed and when the search starts.", 10000, "1000"),
            "recipe_max_jobs_per_file": _bound(
                "The most jobs one recipe file may create: the trials of all its experiments, search trials "
                "included, counted before any is expanded. A file over it becomes its invalid_recipe_ DAG.",
                10000, "2000"),
            "recipe_max_jobs_per_folder": _bound(
                "The most jobs the recipes of one folder may create together (files in name order; the file "
                "that would go over it is refused).", 50000, "10000"),
            "recipe_max_search_trials": _bound(
                "The most samples (trials) of one recipe experiment with a search.",
                4096, "1024"),
            "recipe_parse_seconds": _bound(
                "CPU seconds to read, validate and build one recipe file's DAG; a file past it is refused so "
                "the other recipes load.", 5, "2", kind="float"),
            "recipe_folder_parse_seconds": _bound(
                "Wall seconds for loading the whole recipes folder; files left after it are refused. Unset: "
                "half of [core] dagbag_import_timeout.", None, "10", kind="float"),
            "recipes_folder": _option(
                "The folder of YAML recipes that the shipped dags/ml_recipes.py turns into DAGs: an absolute path, "
                "or one relative to that DAG file's folder. A folder that does not exist is a warning on the DAG "
                "file (no recipe DAGs). Unset: recipes/ beside the DAG file's folder, as in the repository.",
                example="/opt/airflow/recipes",
            ),
            "recipe_cache_dir": _option(
                "Where validated recipes are cached (keyed by the file's SHA-256, the package and the Python "
                "version), a folder only the current user may write; an empty value turns the cache off. "
                "Unset: $AIRFLOW_HOME/ml/recipe-cache.",
                example="/var/cache/airflow-ml/recipes",
            ),
        },
    },
}


def get_provider_info() -> dict:
    return {
        "package-name": "airflow-ml-provider",
        "name": "ML Training",
        "description": "Distributed Horovod and LightGBM training on local processes, Kubeflow MPIJob, "
        "Volcano and Kubernetes Indexed Jobs.",
        "versions": [__version__],
        "integrations": [
            {"integration-name": "ML Training", "external-doc-url": DOCS_URL, "tags": ["software"]},
        ],
        "hooks": [
            {
                "integration-name": "ML Training",
                "python-modules": [
                    "airflow_ml_provider.hooks.training_backend",
                    "airflow_ml_provider.hooks.elasticsearch_logs",
                    "airflow_ml_provider.hooks.model_registry",
                ],
            },
        ],
        "operators": [
            {
                "integration-name": "ML Training",
                "python-modules": [
                    "airflow_ml_provider.operators.base_job",
                    "airflow_ml_provider.operators.training",
                    "airflow_ml_provider.operators.parameter_server",
                    "airflow_ml_provider.operators.search",
                    "airflow_ml_provider.operators.preprocess",
                    "airflow_ml_provider.operators.evaluate",
                    "airflow_ml_provider.operators.scoring",
                    "airflow_ml_provider.operators.gate",
                    "airflow_ml_provider.operators.deploy",
                    "airflow_ml_provider.operators.recipe",
                    "airflow_ml_provider.operators.approval",
                    "airflow_ml_provider.recipes.search",
                    "airflow_ml_provider.recipes.dag",
                ],
            },
        ],
        "plugins": [
            {"name": "ml_training", "plugin-class": "airflow_ml_provider.plugins.provider_plugin.MLTrainingPlugin"},
        ],
        "sensors": [
            {
                "integration-name": "ML Training",
                "python-modules": [
                    "airflow_ml_provider.sensors.training_job",
                    "airflow_ml_provider.sensors.elasticsearch_log",
                ],
            },
        ],
        "triggers": [
            {
                "integration-name": "ML Training",
                "python-modules": [
                    "airflow_ml_provider.triggers.training_job",
                    "airflow_ml_provider.triggers.elasticsearch_log",
                    "airflow_ml_provider.triggers.search",
                    "airflow_ml_provider.triggers.durable",
                    "airflow_ml_provider.triggers.serialized",
                ],
            },
        ],
        "connection-types": [
            {
                "connection-type": "mltraining",
                "hook-class-name": "airflow_ml_provider.hooks.training_backend.TrainingBackendHook",
                "hook-name": "ML Training Backend",
                "ui-field-behaviour": {
                    "hidden-fields": ["host", "schema", "login", "password", "port"],
                    "relabeling": {},
                    "placeholders": {},
                },
                "conn-fields": _TRAINING_FIELDS,
            },
            {
                "connection-type": "mlregistry",
                "hook-class-name": "airflow_ml_provider.hooks.model_registry.ModelRegistryHook",
                "hook-name": "ML Model Registry",
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "port"],
                    "relabeling": {"host": "Tracking URI", "login": "Username", "password": "Password"},
                    "placeholders": {
                        "host": "http://mlflow:5000 (without a connection: the embedded SQLite registry)",
                        "login": "basic auth user (optional)",
                        "password": "basic auth password (optional)",
                    },
                },
                "conn-fields": _REGISTRY_FIELDS,
            },
        ],
        "extra-links": [
            "airflow_ml_provider.operators.links.MLflowModelVersionLink",
            "airflow_ml_provider.operators.links.MLflowBestTrialLink",
            "airflow_ml_provider.operators.links.KibanaJobLink",
            "airflow_ml_provider.operators.links.GrafanaJobLink",
            "airflow_ml_provider.operators.links.MLflowEvaluationLink",
        ],
        "config": CONFIG,
    }
