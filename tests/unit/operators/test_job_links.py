"""Job tasks declare the Kibana/Grafana links only when their URL templates are configured: Airflow stores
every declared link as an XCom row when a task ends, so an unconfigured one would be an empty row."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from airflow_ml_provider.operators.links import GrafanaJobLink, KibanaJobLink, job_links

DECLARED = """
import json
from airflow_ml_provider.operators.evaluate import EvaluateModelOperator
from airflow_ml_provider.operators.training import LightGBMTrainingOperator
print(json.dumps([[link.name for link in cls.operator_extra_links]
                  for cls in (LightGBMTrainingOperator, EvaluateModelOperator)]))
"""


def test_job_links_are_the_configured_ones(monkeypatch):
    monkeypatch.delenv("AIRFLOW__ML_TRAINING__KIBANA_URL_TEMPLATE", raising=False)
    monkeypatch.delenv("AIRFLOW__ML_TRAINING__GRAFANA_URL_TEMPLATE", raising=False)
    assert job_links() == ()
    monkeypatch.setenv(
        "AIRFLOW__ML_TRAINING__GRAFANA_URL_TEMPLATE", "https://grafana/d/jobs?var-job={job_name}"
    )
    assert [type(link) for link in job_links()] == [GrafanaJobLink]
    monkeypatch.setenv(
        "AIRFLOW__ML_TRAINING__KIBANA_URL_TEMPLATE", "https://kibana/app/discover#/?q={job_name}"
    )
    assert [type(link) for link in job_links()] == [KibanaJobLink, GrafanaJobLink]


@pytest.mark.parametrize(
    ("env", "declared"),
    [
        ({}, [[], ["MLflow evaluation (plot, report)"]]),
        (
            {"AIRFLOW__ML_TRAINING__KIBANA_URL_TEMPLATE": "https://kibana/?q={job_name}"},
            [["Job logs (Kibana)"], ["Job logs (Kibana)", "MLflow evaluation (plot, report)"]],
        ),
    ],
)
def test_operators_declare_only_configured_links(env, declared):
    import os

    clean = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__ML_TRAINING__")}
    done = subprocess.run(
        [sys.executable, "-c", DECLARED], env={**clean, **env}, capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout.splitlines()[-1]) == declared
