"""Hostile trigger conf sent the way the issue's adversary sent it: through the REST API of a real Airflow
deployment (tests/deployments.py: api-server, scheduler, dag-processor, triggerer; the pipeline UI's, see
support.SHARED_DEPLOYMENTS) serving the shipped ml_training_pipeline. Whatever Airflow lets through at
trigger time, the first task, ``prepare_data``, refuses with "Params refused: <field>: ..." before any job
starts (issue 19 L1, L6, L9).
"""

from __future__ import annotations

import contextlib
import json
import math

import pytest
from airflow_stack import AirflowStack, ApiError

from support import wait_for

pytestmark = pytest.mark.integration

DAG_ID = "ml_training_pipeline"


FAKE_SECRET = "ghp_FAKE_TOKEN_0123456789abcdef,prod-db-password-hunter2"


@pytest.fixture(scope="module")
def folders(ui_home, tmp_path_factory) -> dict[str, str]:
    """A folder inside the deployment's data roots (its default one, ``$AIRFLOW_HOME/data``) and one outside
    them, each holding a CSV whose first line is a secret."""
    root, outside = ui_home / "data" / "a folder", tmp_path_factory.mktemp("outside")
    root.mkdir(parents=True)
    (outside / "secret.csv").write_text(FAKE_SECRET + ",label\n1,2,0\n")
    (root / "secret-header.csv").write_text(FAKE_SECRET + "\n1,2\n")
    return {"root": str(root), "outside": str(outside)}


def first_task_refusal(stack: AirflowStack, run_id: str) -> str:
    """The run failed at prepare_data, nothing after it ran; returns prepare_data's log (with the error)."""
    assert stack.wait_for_run(DAG_ID, run_id, timeout=600) == "failed"
    states = {t["task_id"]: t["state"] for t in stack.task_instances(DAG_ID, run_id)}
    assert states["prepare_data"] == "failed", states
    assert states["train_lightgbm"] in ("upstream_failed", None) and states["deploy"] == "upstream_failed", states

    def log() -> str:
        return "\n".join(json.dumps(entry) for entry in stack.task_log(DAG_ID, run_id, "prepare_data"))

    with contextlib.suppress(AssertionError):  # the run can end before the task's last log lines are written
        wait_for(lambda: '"level": "error"' in log(), timeout=60, what="prepare_data's error in its log")
    return log()


# (case, trigger conf, what prepare_data's refusal says)
REFUSED = [
    ("unknown_key", {"../../evil key": "x"}, "Params refused: '../../evil key': not a Param of this DAG"),
    ("200_unknown_keys", {f"k{i:03d}": i for i in range(200)},
     "the trigger conf has 200 keys, more than the 64 allowed ([ml_training] max_conf_keys)"),
    ("a_2_mb_key", {"k" * 2_000_000: 1}, "more than the 65536 allowed ([ml_training] max_conf_bytes)"),
    ("integer_as_float", {"boost_rounds": 5.0},
     "Params refused: boost_rounds: 5.0 is not an integer (write 5 without a decimal point)"),
    ("csv_outside_the_roots", {"data_path": "{outside}/secret.csv"}, "/secret.csv' is outside the data roots"),
    ("csv_whose_header_is_a_token", {"data_path": "{root}/secret-header.csv"},
     "no 'label' column in its header line (2 comma-separated names, not shown)"),
    ("relative_image", {"image": "venv"}, "Params refused: image: 'venv' is not an absolute path"),
]


@pytest.fixture(scope="module")
def refused_runs(stack, folders) -> dict[str, str]:
    """Every hostile conf triggered at once (they run side by side), then each run's refusal."""
    run_ids = {case: stack.trigger_dag(DAG_ID, _filled(conf, folders)) for case, conf, _ in REFUSED}
    return {case: first_task_refusal(stack, run_id) for case, run_id in run_ids.items()}


@pytest.mark.parametrize(("case", "message"), [(case, message) for case, _, message in REFUSED],
                         ids=[case for case, _, _ in REFUSED])
def test_what_airflow_lets_through_is_refused_by_the_first_task_naming_it(refused_runs, case, message):
    assert message in refused_runs[case]


def test_no_refusal_echoes_a_files_content(refused_runs):
    """Issue 19 L1: the refusal of a CSV printed its first line (``['ghp_FAKE_TOKEN_...', ...]``)."""
    for case, log in refused_runs.items():
        assert "ghp_FAKE" not in log and "hunter2" not in log, case


def _filled(run_conf: dict, folders: dict[str, str]) -> dict:
    return {key: value.format(**folders) if isinstance(value, str) else value for key, value in run_conf.items()}


def test_a_huge_key_is_not_echoed_in_full(refused_runs):
    log = refused_runs["a_2_mb_key"]
    assert "'" + "k" * 40 + "...'" in log and "k" * 1000 not in log


def test_a_nan_is_refused_by_the_database_and_starts_no_run(stack):
    """NaN passes every JSON-schema bound of a number Param (an infinite one fails the maximum: 400);
    PostgreSQL's JSON refuses it, so the POST fails (422) before a run exists. (On SQLite it was stored as null,
    which prepare_data refused:
    "Params refused: learning_rate: no number given"; tests/security/test_param_corpus.py covers that check.)"""
    runs = stack.api("GET", f"/dags/{DAG_ID}/dagRuns")["total_entries"]
    with pytest.raises(ApiError) as refused:
        stack.trigger_dag(DAG_ID, {"learning_rate": math.nan})
    assert refused.value.status == 422 and "Value rejected by database" in refused.value.body, refused.value
    assert stack.api("GET", f"/dags/{DAG_ID}/dagRuns")["total_entries"] == runs


def test_another_teams_model_name_is_refused_by_the_server_and_starts_no_run(stack):
    """Issue 19 M1: ``model_name`` was free text, so a run could write (and take the aliases of) another team's
    model. The Param allows only the DAG's own names; the API refuses any other before a run exists."""
    runs = stack.api("GET", f"/dags/{DAG_ID}/dagRuns")["total_entries"]
    for name in ("other_team_model", "ml_training_pipelineX"):
        with pytest.raises(ApiError) as refused:
            stack.trigger_dag(DAG_ID, {"model_name": name})
        assert refused.value.status == 400 and "Invalid input for param model_name" in refused.value.body, refused.value
    assert stack.api("GET", f"/dags/{DAG_ID}/dagRuns")["total_entries"] == runs


@pytest.mark.parametrize(("conf", "words"), [
    ({"workers": 0}, "Invalid input for param workers: Workers: a whole number from 1 to 64; you entered 0"),
    ({"epochs": None}, "Invalid input for param epochs: Epochs: a whole number from 1 to 500; you entered nothing"),
    ({"framework": "<script>x</script>"},
     'Invalid input for param framework: Framework: one of lightgbm, xgboost, horovod, pytorch; you entered '
     '"<script>x</script>"'),
])
def test_a_refusal_at_trigger_is_said_in_the_params_words_and_starts_no_run(stack, conf, words):
    """Issue 45 D2/D3: the provider's plugin (its API server middleware) answers Airflow's 400 in the Param's words
    instead of jsonschema's dump; an emptied number (null) is refused there too, before a run exists."""
    runs = stack.api("GET", f"/dags/{DAG_ID}/dagRuns")["total_entries"]
    with pytest.raises(ApiError) as refused:
        stack.trigger_dag(DAG_ID, conf)
    assert refused.value.status == 400 and json.loads(refused.value.body) == {"detail": words}, refused.value
    assert stack.api("GET", f"/dags/{DAG_ID}/dagRuns")["total_entries"] == runs
