"""Extra links on task pages: the registered MLflow model version, and the job's Kibana/Grafana views.

Kibana and Grafana links appear when configured, as URL templates in the ``[ml_training]`` section:
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


class MLflowModelVersionLink(BaseOperatorLink):
    """The model version a deploy task registered (from its returned ``url``)."""

    name = "MLflow model version"

    def get_link(self, operator, *, ti_key) -> str:
        from airflow.sdk.execution_time.xcom import XCom

        value = XCom.get_value(ti_key=ti_key, key="return_value")
        return value.get("url", "") if isinstance(value, dict) else ""


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
