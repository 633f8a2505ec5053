"""The model lifecycle as a person lives it in the Airflow UI (issue 25): Debian's chromium, headless, drives
one real Airflow deployment (api-server, scheduler, dag-processor, triggerer) serving the shipped
ml_training_pipeline, ml_batch_scoring and ml_recipes DAGs, in this order:

1. a Horovod run triggered from the form with approval required, approved on its Required Actions page:
   the summary's log says who approved;
2. that champion (a Keras model) is scored by the ``ml_batch_scoring`` run its Asset event triggers;
3. a run whose gate rejects registers a version that the next scoring run names and does not score;
4. a finished training task cleared from the UI trains again as a new job, and a new version is registered;
5. a recipe sweep triggered from its form reports its best trial, and its view lists the sweep's trials with the
   best marked, each linking to its own view and, from the Training tab, to its log;
6. a recipe search's training view lists its trials with the best marked, its objective named by its metric, and a
   trial's link opens the trial's page: its parameters, its objective per step, its job's state and last lines.

Every step leaves a screenshot named after it in the folder printed at the start; what is asserted is what
the page shows, the task states and logs the REST API serves, and the registry (MLflow) where a version
matters. Jobs are as short as prove the point (1 epoch, 10 boosting rounds, 2000 rows). docs/training_view.md shows
6-search-trial-page.png as images/training_view_trial.png."""

from __future__ import annotations

import re
from urllib.parse import quote, urlsplit

import pytest
from airflow_stack import TERMINAL_RUN_STATES
from pages import park, visit
from trigger_form import trigger_from_form

from airflow_ml_provider.runtime.datasets import write_synthetic
from support import needs_horovod

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]  # a deployment and a Horovod run in one test

PIPELINE, SCORING, SWEEP = "ml_training_pipeline", "ml_batch_scoring", "recipe_lightgbm_sweep"
SEARCH = "recipe_view_search"  # tests/fixtures/recipes/view_search.yaml, served among the shipped recipes
MODEL = PIPELINE  # the registered model every pipeline run here writes


@pytest.fixture(scope="module")
def dag_files() -> list[str]:
    return ["dags/ml_training_pipeline.py", "dags/ml_batch_scoring.py", "dags/ml_recipes.py",
            "recipes/lightgbm_sweep.yaml", ("tests/fixtures/recipes/view_search.yaml", "recipes/view_search.yaml")]


@pytest.fixture(scope="module")
def served(stack):
    for dag_id in (PIPELINE, SCORING, SWEEP, SEARCH):
        stack.wait_for_dag(dag_id)
    return stack


@pytest.fixture(scope="module")
def registry(mlflow_ui, ui_home):
    """The deployment's registry, read as MLflow reads it: its tracking server (tests/deployments.py), or where
    none can run here (no .venv-mlflow) the embedded SQLite store under its AIRFLOW_HOME."""
    from mlflow import MlflowClient

    if mlflow_ui:
        return MlflowClient(tracking_uri=mlflow_ui["url"], registry_uri=mlflow_ui["url"])
    return MlflowClient(tracking_uri=f"sqlite:///{ui_home / 'ml' / 'mlflow.db'}")


def states(stack, dag_id: str, run_id: str) -> dict[str, str]:
    return {t["task_id"]: t["state"] for t in stack.task_instances(dag_id, run_id) if t["map_index"] == -1}


def log_text(stack, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
    return "\n".join(str(e.get("event")) for e in stack.task_log(dag_id, run_id, task_id, try_number))


def show_log(page, stack, dag_id: str, run_id: str, task_id: str, text: str, shot, try_number: int | None = None):
    """The task's log page, once ``text`` is on it; a screenshot of it."""
    url = f"{stack.url}/dags/{dag_id}/runs/{quote(run_id, safe='')}/tasks/{task_id}"
    visit(page, url + (f"?try_number={try_number}" if try_number else ""))
    page.get_by_text(text).first.wait_for()
    page.get_by_text(text).first.scroll_into_view_if_needed()
    page.screenshot(path=shot)


def scoring_run_of(stack, version: int, timeout: float = 600) -> str:
    """The ml_batch_scoring run that the Asset event of ``version`` of the model triggered, once it ended."""

    def found():
        for run in stack.api("GET", f"/dags/{SCORING}/dagRuns", query={"limit": 100})["dag_runs"]:
            path = f"/dags/{SCORING}/dagRuns/{quote(run['dag_run_id'], safe='')}/upstreamAssetEvents"
            events = stack.api("GET", path)["asset_events"]
            if any((event.get("extra") or {}).get("version") == version for event in events):
                return run["dag_run_id"]
        return None

    run_id = stack.wait(found, timeout=timeout, what=f"a {SCORING} run for version {version}")
    stack.wait_for_run(SCORING, run_id, timeout=timeout)
    return run_id


# --- 1. the summary shows the approval ------------------------------------------------------------------
@pytest.fixture(scope="module")
def horovod(served, page, screenshots) -> dict:
    """A Horovod run (1 epoch, 1 worker) triggered from the form with approval required, approved in the
    HITL form."""
    stack = served
    run_id = trigger_from_form(page, stack, PIPELINE, choices=[("framework", "Horovod (TensorFlow/Keras)")],
                               fields=[("epochs", 1), ("workers", 1)], switches=["require_approval"])

    def asking() -> bool:
        if states(stack, PIPELINE, run_id).get("approve") == "awaiting_input":
            return True
        # a run that ended never asks: fail now, with what failed, not after the whole timeout
        assert stack.run_state(PIPELINE, run_id) not in TERMINAL_RUN_STATES, states(stack, PIPELINE, run_id)
        return False

    stack.wait(asking, timeout=900, what="the approve task to ask")
    # A reviewer answers after the asking worker is gone; answered within its exit (~5 s), Airflow 3.3.2
    # failed the approved task (see AirflowStack.worker_exit_processed)
    stack.wait(lambda: stack.worker_exit_processed(PIPELINE, run_id, "approve"), timeout=120,
               what="the scheduler to see the asking worker exit")
    visit(page, f"{stack.url}/dags/{PIPELINE}/runs/{quote(run_id, safe='')}/tasks/approve/required_actions")
    approve = page.get_by_test_id("hitl-option-Approve")
    approve.wait_for()
    page.screenshot(path=screenshots / "1-approval-form.png")
    approve.click()
    stack.wait(lambda: states(stack, PIPELINE, run_id).get("approve") != "awaiting_input", timeout=120,
               what="the approval to be recorded")
    park(page)
    state = stack.wait_for_run(PIPELINE, run_id, timeout=600)
    return {"run_id": run_id, "state": state, "deployed": stack.xcom(PIPELINE, run_id, "deploy")}


@needs_horovod
def test_1_the_summary_shows_the_approval_outcome(horovod, served, page, screenshots, mlflow_ui):
    run_id = horovod["run_id"]
    assert horovod["state"] == "success", states(served, PIPELINE, run_id)
    assert states(served, PIPELINE, run_id)["train_horovod"] == "success"
    assert "approval    APPROVED by admin" in log_text(served, PIPELINE, run_id, "summary")
    show_log(page, served, PIPELINE, run_id, "summary", "APPROVED by admin", screenshots / "1-summary-approved.png")
    assert served.xcom(PIPELINE, run_id, "summary")["approval"] == {
        "asked": True, "approved": True, "by": "admin", "reason": served.xcom(PIPELINE, run_id, "approve")["reason"]}
    assert "champion" in horovod["deployed"]["aliases"]
    # the MLflow links go to the tracking server (issue 40: they went to a UI that nothing served); none on
    # the embedded registry, which no UI serves here
    for task_id, link in (("deploy", "MLflow model version"), ("evaluate", "MLflow evaluation (plot, report)")):
        path = f"/dags/{PIPELINE}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}/links"
        url = served.api("GET", path)["extra_links"][link]
        assert url.startswith(f"{mlflow_ui['url']}/#/") if mlflow_ui else url is None, (task_id, url)


# --- 2. the Horovod champion is scored -------------------------------------------------------------------
@needs_horovod
def test_2_the_horovod_champion_is_scored_by_the_asset_triggered_run(horovod, served, page, registry, screenshots):
    version = horovod["deployed"]["version"]
    assert str(registry.get_model_version_by_alias(MODEL, "champion").version) == str(version)
    run_id = scoring_run_of(served, version)
    assert states(served, SCORING, run_id) == {"choose_model": "success", "score": "success"}
    chosen = log_text(served, SCORING, run_id, "choose_model")
    assert f"Scoring with {MODEL} version {version}: the champion" in chosen
    scored = log_text(served, SCORING, run_id, "score")
    where = re.search(rf"Scored 1000 rows with {MODEL} version {version}: predictions at (\S+)", scored)
    assert where, scored
    show_log(page, served, SCORING, run_id, "score", f"version {version}: predictions at",
             screenshots / "2-horovod-champion-scored.png")


# --- 3. a rejected version is not scored ---------------------------------------------------------------
@pytest.fixture(scope="module")
def rejected(served, page) -> dict:
    """A short LightGBM run whose gate cannot pass (minimum accuracy 1), triggered from the form."""
    run_id = trigger_from_form(page, served, PIPELINE, fields=[("boost_rounds", 10), ("min_accuracy", 1)])
    state = served.wait_for_run(PIPELINE, run_id, timeout=900)
    return {"run_id": run_id, "state": state, "deployed": served.xcom(PIPELINE, run_id, "deploy")}


def test_3_a_version_the_gate_rejected_is_not_scored(rejected, served, page, registry, screenshots):
    run_id, version = rejected["run_id"], rejected["deployed"]["version"]
    assert rejected["state"] == "success", states(served, PIPELINE, run_id)
    assert served.xcom(PIPELINE, run_id, "gate")["passed"] is False
    assert rejected["deployed"]["aliases"] == []
    assert registry.get_model_version(MODEL, str(version)).aliases == []  # registered, neither champion nor challenger
    scoring = scoring_run_of(served, version)
    # Its only event is the rejected version: the champion, unchanged, was scored when it was promoted.
    assert states(served, SCORING, scoring) == {"choose_model": "skipped", "score": "skipped"}
    chosen = log_text(served, SCORING, scoring, "choose_model")
    assert f"Not scoring {MODEL} version {version}: the promotion gate rejected it" in chosen
    show_log(page, served, SCORING, scoring, "choose_model", "the promotion gate rejected it",
             screenshots / "3-rejected-version-not-scored.png")


# --- 4. clear means retrain -------------------------------------------------------------------------------
def test_4_a_cleared_finished_training_task_retrains(rejected, served, page, registry, screenshots):
    run_id = rejected["run_id"]
    before = served.xcom(PIPELINE, run_id, "train_lightgbm")
    # The move returns before the app has drawn the task: the page still shows test 3's task (another DAG's,
    # with its own clear button) until the training log is on it, as a person waits for the page they opened
    visit(page, f"{served.url}/dags/{PIPELINE}/runs/{quote(run_id, safe='')}/tasks/train_lightgbm")
    page.get_by_text("final metrics").first.wait_for()
    page.get_by_role("button", name="Press shift+c to clear").click()
    dialog = page.get_by_role("dialog")
    from playwright.sync_api import expect  # imported by the test that runs, not by every worker's collection

    expect(dialog).to_contain_text("Clear Task Instance: train_lightgbm")
    # downstream, by default: the new model is evaluated and registered. The list of affected tasks loads
    # after the button shows (a dry run on the API server): waited for, as a person reads it before confirming
    expect(dialog).to_contain_text("deploy", timeout=120_000)
    page.screenshot(path=screenshots / "4-clear-dialog.png")
    dialog.get_by_role("button", name="Confirm").click()

    def retried():
        task = next(t for t in served.task_instances(PIPELINE, run_id) if t["task_id"] == "train_lightgbm")
        return task["try_number"] >= 2
    served.wait(retried, timeout=300, what="train_lightgbm's second try")
    park(page)
    assert served.wait_for_run(PIPELINE, run_id, timeout=900) == "success", states(served, PIPELINE, run_id)
    retrain = log_text(served, PIPELINE, run_id, "train_lightgbm", try_number=2)
    assert "already succeeded" in retrain and "retrains from scratch" in retrain, retrain
    after = served.xcom(PIPELINE, run_id, "train_lightgbm")
    assert "retrain-1" in after["model_path"] and "retrain-1" not in before["model_path"], (before, after)
    deployed = served.xcom(PIPELINE, run_id, "deploy")
    assert deployed["version"] == rejected["deployed"]["version"] + 1
    new = registry.get_model_version(MODEL, str(deployed["version"]))
    assert int(new.tags["airflow.try_number"]) >= 2  # registered by the cleared run's new deploy try
    show_log(page, served, PIPELINE, run_id, "train_lightgbm", "retrains from scratch",
             screenshots / "4-cleared-task-retrains.png", try_number=2)


# --- 5. a recipe sweep reports its best trial ----------------------------------------------------------
def test_5_a_recipe_sweep_reports_its_best_trial(served, page, screenshots):
    run_id = trigger_from_form(page, served, SWEEP, fields=[("rows", 2000), ("features", 5)])
    assert served.wait_for_run(SWEEP, run_id, timeout=900) == "success", states(served, SWEEP, run_id)
    best = served.xcom(SWEEP, run_id, "sweep.best")
    assert best["n_trials"] == 6 and best["n_reported"] == 6
    values = [trial["value"] for trial in best["trials"]]
    assert best["best_value"] == min(values)
    line = f"Best trial of sweep: #{best['best_trial']}"
    assert line in log_text(served, SWEEP, run_id, "sweep.best")
    show_log(page, served, SWEEP, run_id, "sweep.best", line, screenshots / "5-sweep-best-trial.png")
    # its training view lists the sweep's trials (its mapped task instances), the best marked, its loss named
    page.goto(f"{served.url}/ml-training/ti/{SWEEP}/{quote(run_id, safe='')}/sweep.best")
    assert page.get_by_role("heading", level=1).inner_text() == f"{SWEEP} / sweep.best: task success"
    index = best["best_trial"]  # a map index
    assert page.locator("table tr:has(td)").count() == 6, page.inner_text("body")[:2000]
    marked = page.locator("tr.best")
    assert marked.count() == 1 and marked.locator("td").first.inner_text() == f"{index} (best)"
    assert page.locator("svg text.title", has_text="loss per trial (minimize)").count() == 1
    page.screenshot(path=screenshots / "5-sweep-trials.png", full_page=True)
    marked.get_by_role("link", name=str(index), exact=True).click()  # the trial's own view: its job
    page.wait_for_url(lambda url: urlsplit(url).path.endswith(f"/ti/{SWEEP}/{quote(run_id, safe='')}/sweep")
                      and urlsplit(url).query == f"map_index={index}")
    assert page.get_by_role("heading", level=1).inner_text() == f"{SWEEP} / sweep [{index}]: task success, job SUCCEEDED"
    assert f"Job {best['best_job_name']} on backend local" in page.inner_text("body")
    # its log link, from sweep.best's Training tab: Airflow's page of that task instance, inside the tab's frame
    page.goto(f"{served.url}/dags/{SWEEP}/runs/{quote(run_id, safe='')}/tasks/sweep.best/plugin/ml-training")
    frame = page.frame_locator("iframe")
    frame.locator("tr.best").get_by_role("link", name="log", exact=True).click()
    logged = frame.get_by_text(f"Job {best['best_job_name']} succeeded").first
    try:
        logged.wait_for(timeout=120_000)
    finally:
        page.screenshot(path=screenshots / "5-sweep-trial-log.png")


# --- 6. a search's trials, and a trial's page ----------------------------------------------------------
def test_6_a_searchs_view_marks_its_best_trial_whose_link_opens_its_page(served, page, ui_home, screenshots, mlflow_ui):
    data = ui_home / "ml" / "data" / "view_search"  # the local root's data/: the jobs see it
    data.mkdir(parents=True, exist_ok=True)
    write_synthetic(data / "train.npz", data / "valid.npz", rows=2000, features=5, seed=2)
    park(page)
    run_id = served.trigger_dag(SEARCH, {"train": str(data / "train.npz"), "valid": str(data / "valid.npz")})
    assert served.wait_for_run(SEARCH, run_id, timeout=900) == "success", states(served, SEARCH, run_id)
    summary = served.xcom(SEARCH, run_id, "tune")
    best = summary["best_trial"]
    trial = next(t for t in summary["trials"] if t["number"] == best)

    page.goto(f"{served.url}/ml-training/ti/{SEARCH}/{quote(run_id, safe='')}/tune")
    rows = page.locator("table tr:has(td)").filter(has_text="COMPLETE")
    assert rows.count() == summary["n_complete"] == 4, page.inner_text("body")[:2000]
    marked = page.locator("tr.best")
    assert marked.count() == 1 and marked.locator("td").first.inner_text() == f"{best} (best)"
    # its objective named as the recipe's search recorded it (its task has no settings the API server reads)
    assert page.locator("svg text.title", has_text="loss per trial (minimize)").count() == 1
    page.screenshot(path=screenshots / "6-search-trials.png", full_page=True)

    marked.get_by_role("link", name=str(best), exact=True).click()  # the trial's page, as a person follows it
    page.wait_for_url(lambda url: urlsplit(url).path.endswith(f"/trial/{SEARCH}/{quote(run_id, safe='')}/tune/{best}"))
    heading = page.get_by_role("heading", level=1)
    assert heading.inner_text() == f"{SEARCH} / tune: trial {best} COMPLETE, job SUCCEEDED"
    assert page.get_by_text("All trials of the search (the best trial)").is_visible()
    cells = {row.locator("th").inner_text(): row.locator("td").inner_text()
             for row in page.locator("table").first.locator("tr").all()}
    assert cells["job"] == trial["job_name"] and float(cells["loss (minimize)"]) == trial["value"], cells
    assert {name: cells[f"parameter {name}"] for name in trial["params"]} == {
        name: str(value) for name, value in trial["params"].items()}, cells
    # the loss the runner reported to the study as the job's lines came, up to its last round
    steps = served._request("GET", f"/ml-training/api/trial/{SEARCH}/{quote(run_id, safe='')}/tune/{best}",
                            headers={"Authorization": f"Bearer {served.token()}"})["trial"]["steps"]
    assert steps and steps[-1][0] == 20, steps
    chart = page.locator("h2:has-text('Objective per step') + svg")
    assert chart.locator("circle").count() == len(steps), page.inner_text("body")[:2000]
    assert f"Job {trial['job_name']} on backend local" in page.inner_text("body")
    assert page.get_by_role("heading", name="Workers' last lines").is_visible()
    assert re.search(r"\] result\s.*num_trees=20", page.locator("pre").last.inner_text()), page.locator("pre").last.inner_text()
    links = {a.inner_text(): a.get_attribute("href") for a in page.locator("a").all()}
    if mlflow_ui:  # the trial's MLflow child run, on the tracking server
        assert links[f"MLflow (trial {best})"].startswith(f"{mlflow_ui['url']}/#/"), links
    page.screenshot(path=screenshots / "6-search-trial-page.png", full_page=True)

    page.get_by_role("link", name="All trials of the search").click()  # and back to all the trials
    page.locator("tr.best").wait_for()
    assert urlsplit(page.url).path.endswith(f"/ti/{SEARCH}/{quote(run_id, safe='')}/tune")
