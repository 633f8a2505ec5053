"""Extra links on task pages: the MLflow evaluation run and registered model version, and the job's
Kibana/Grafana views.

Airflow stores every link an operator declares as an XCom row when the task ends, so only links
that can lead somewhere are declared: the MLflow ones on the evaluate/deploy tasks, whose URLs come from the
registry connection's UI (its ``ui_url``, or its http(s) tracking URI; for the embedded registry ``[ml_training]
mlflow_ui_url``, which ``make ui`` sets) and are empty, no link, where there is no UI), and Kibana and
Grafana (``job_links()``) only when configured, as URL templates in the ``[ml_training]`` section:
``kibana_url_template`` / ``grafana_url_template`` with ``{job_name}``, ``{dag_id}``, ``{task_id}``,
``{run_id}``, ``{map_index}`` and ``{try_number}`` (each URL-quoted), for example
``https://kibana.example.com/app/discover#/?_a=(query:(language:kuery,query:'labels.job_name:"{job_name}"'))``.
"""

from __future__ import annotations

import re
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink, conf

from airflow_ml_provider.jobs.naming import JobIdentity

_FIELD = re.compile(r"\{(job_name|dag_id|task_id|run_id|map_index|try_number)\}")


class _ResultLink(BaseOperatorLink):
    """A URL the task returned (a key of its XCom return value)."""

    key: str

    def get_link(self, operator, *, ti_key) -> str:
        from airflow.sdk.execution_time.xcom import XCom

        value = XCom.get_value(ti_key=ti_key, key="return_value")
        return (value.get(self.key) or "") if isinstance(value, dict) else ""


class MLflowModelVersionLink(_ResultLink):
    """The model version a deploy task registered (from its returned ``url``)."""

    name = "MLflow model version"
    key = "url"


class MLflowEvaluationLink(_ResultLink):
    """The evaluation's MLflow run, opened on its artifacts: the training curve, report and metrics."""

    name = "MLflow evaluation (plot, report)"
    key = "artifacts_url"


class MLflowBestTrialLink(_ResultLink):
    """The MLflow run that records a recipe experiment's best trial (from its returned ``url``)."""

    name = "MLflow best trial"
    key = "url"


class _JobLink(BaseOperatorLink):
    """A link built from a configured template and the job's deterministic name."""

    option: str

    def get_link(self, operator, *, ti_key) -> str:
        template = conf.get("ml_training", self.option, fallback="")
        if not template:
            return ""
        map_index = getattr(ti_key, "map_index", -1)
        identity = JobIdentity(
            ti_key.dag_id, ti_key.task_id, ti_key.run_id, map_index if map_index is not None else -1
        )
        fields = {
            "job_name": identity.name,
            "dag_id": ti_key.dag_id,
            "task_id": ti_key.task_id,
            "run_id": ti_key.run_id,
            "map_index": identity.map_index,
            "try_number": ti_key.try_number,
        }
        return _FIELD.sub(lambda match: quote(str(fields[match.group(1)]), safe=""), template)


class KibanaJobLink(_JobLink):
    name = "Job logs (Kibana)"
    option = "kibana_url_template"


class GrafanaJobLink(_JobLink):
    name = "Job metrics (Grafana)"
    option = "grafana_url_template"


def job_links() -> tuple[BaseOperatorLink, ...]:
    """The Kibana/Grafana links whose URL templates are configured (read when the operator class is
    defined: the DAG processor and the workers share the configuration)."""
    configured = (
        link for link in (KibanaJobLink, GrafanaJobLink) if conf.get("ml_training", link.option, fallback="")
    )
    return tuple(link() for link in configured)
