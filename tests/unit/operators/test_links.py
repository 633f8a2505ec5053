"""Kibana/Grafana job links: built from configured templates and the job's deterministic name."""

from __future__ import annotations

from airflow.models.taskinstancekey import TaskInstanceKey

from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.operators.links import GrafanaJobLink, KibanaJobLink

KEY = TaskInstanceKey("dag a", "train", "manual__2026-01-01T00:00:00+00:00", try_number=2, map_index=3)


def test_links_are_empty_until_configured(monkeypatch):
    monkeypatch.delenv("AIRFLOW__ML_TRAINING__KIBANA_URL_TEMPLATE", raising=False)
    assert KibanaJobLink().get_link(None, ti_key=KEY) == ""


def test_links_fill_the_template_with_quoted_job_fields(monkeypatch):
    monkeypatch.setenv("AIRFLOW__ML_TRAINING__KIBANA_URL_TEMPLATE",
                       "https://kibana/app/discover#/?q=job:{job_name}&dag={dag_id}&try={try_number}")
    monkeypatch.setenv("AIRFLOW__ML_TRAINING__GRAFANA_URL_TEMPLATE", "https://grafana/d/jobs?var-job={job_name}&i={map_index}")
    name = JobIdentity("dag a", "train", KEY.run_id, 3).name
    assert KibanaJobLink().get_link(None, ti_key=KEY) == f"https://kibana/app/discover#/?q=job:{name}&dag=dag%20a&try=2"
    assert GrafanaJobLink().get_link(None, ti_key=KEY) == f"https://grafana/d/jobs?var-job={name}&i=3"
