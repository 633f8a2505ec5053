"""The provider's training view (plugins.view_app) in a real deployment, as a person sees it in Debian's chromium:
a running LightGBM task's curve grows between two screenshots (the page refreshes itself, no JavaScript), then
shows the finished job, its progress complete and the links to MLflow; the view is listed as the task
instances' "Training" tab. Its API answers 401 without a login and 403 to a user who may not read the DAG, and so
does a search trial's page. Screenshots go to the folder printed at the start (docs/training_view.md shows
training-view-tab.png as images/training_view.png and training-view-tensorboard.png as
images/training_view_tensorboard.png)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

DAG_ID = "ml_training_pipeline"
RUN = {"boost_rounds": 3000, "learning_rate": 0.01, "workers": 1, "shards": 1, "min_accuracy": 0.5}
NO_ROLE_TOKEN = ("from airflow.api_fastapi.app import create_auth_manager\n"
                 "from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser\n"
                 "print(create_auth_manager().generate_jwt(SimpleAuthManagerUser(username='nobody', role=None)))")


def _view_path(run_id: str, api: bool = False) -> str:
    return f"/ml-training/{'api/' if api else ''}ti/{DAG_ID}/{urllib.parse.quote(run_id, safe='')}/train_lightgbm"


@pytest.fixture(scope="module")
def running(stack) -> str:
    """A pipeline run whose LightGBM job is under way, its first points saved."""
    stack.wait_for_dag(DAG_ID)
    run_id = stack.trigger_dag(DAG_ID, RUN)

    def points() -> int:
        try:
            data = stack._request("GET", _view_path(run_id, api=True), headers={"Authorization": f"Bearer {stack.token()}"})
        except Exception:  # noqa: BLE001 - no task instance yet
            return 0
        return len(((data.get("view") or {}).get("metrics") or {}).get("auc", {}).get("series", []))

    stack.wait(lambda: points() >= 2, 900, "the LightGBM job's first points in the view")
    return run_id


def _points(page) -> int:
    return page.locator("svg").first.locator("circle").count()


def test_the_curve_of_a_running_job_grows_then_shows_the_finished_job_and_its_links(page, stack, running,
                                                                                    screenshots):
    assert any(view["name"] == "Training" and view["destination"] == "task_instance"
               for plugin in stack.api("GET", "/plugins")["plugins"] for view in plugin["external_views"])
    page.goto(stack.url + _view_path(running))
    page.locator("svg").first.wait_for()
    before = _points(page)
    page.screenshot(path=screenshots / "training-view-1.png", full_page=True)
    deadline = time.monotonic() + 300
    while _points(page) <= before and time.monotonic() < deadline:
        page.wait_for_timeout(2000)  # the page reloads itself every 5 s while the task runs
    after = _points(page)
    page.screenshot(path=screenshots / "training-view-2.png", full_page=True)
    assert after > before, (before, after)
    assert re.search(r"\d+ of 3000 rounds", page.inner_text("body"))

    assert stack.wait_for_run(DAG_ID, running, timeout=900) == "success"
    page.goto(stack.url + _view_path(running))
    text = page.inner_text("body")
    page.screenshot(path=screenshots / "training-view-done.png", full_page=True)
    assert "task success, job SUCCEEDED" in text and "3000 of 3000 rounds" in text, text[:2000]
    assert "target 0.5" not in text  # the gate's threshold is drawn on accuracy's curve, which LightGBM's job lacks
    board = page.get_by_role("heading", name="TensorBoard")  # the job's scalars, as docs/training_view.md shows them
    board.scroll_into_view_if_needed()
    assert "auc (TensorBoard)" in text and "tensorboard --logdir" in text, text[:2000]
    page.screenshot(path=screenshots / "training-view-tensorboard.png")
    links = {a.inner_text(): a.get_attribute("href") for a in page.locator("a").all()}
    assert links.get("MLflow (deploy)", "").startswith("http") and links.get("MLflow (evaluate)", "").startswith("http")

    # the same view, as the task instance's "Training" tab in Airflow's UI (an iframe of the page; the UI leaves
    # "{MAP_INDEX}" in its address for an unmapped task)
    page.goto(f"{stack.url}/dags/{DAG_ID}/runs/{urllib.parse.quote(running, safe='')}/tasks/train_lightgbm"
              "/plugin/ml-training")
    shown = page.frame_locator("iframe").get_by_text("task success, job SUCCEEDED")
    try:
        shown.wait_for(timeout=120_000)
    finally:
        page.screenshot(path=screenshots / "training-view-tab.png")


def test_the_views_api_needs_a_login_and_the_dags_read_permission(stack, running):
    """The task instance's view and a search trial's page (``/trial/.../<number>``), page and API alike."""
    url = stack.url + _view_path(running, api=True)
    trial = f"/ml-training/{{}}trial/{DAG_ID}/{urllib.parse.quote(running, safe='')}/train_lightgbm/0"
    token = subprocess.run([sys.executable, "-c", NO_ROLE_TOKEN], env=stack.env, capture_output=True, text=True,
                           check=True).stdout.split()[-1]  # its last line (warnings come first)
    for path in (_view_path(running, api=True), _view_path(running), trial.format("api/"), trial.format("")):
        with pytest.raises(urllib.error.HTTPError) as anonymous:
            urllib.request.urlopen(stack.url + path, timeout=60)
        assert anonymous.value.code == 401, path
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(stack.url + path, headers={"Authorization": f"Bearer {token}"}),
                                   timeout=60)
        assert refused.value.code == 403, path
    allowed = json.loads(urllib.request.urlopen(urllib.request.Request(
        url, headers={"Authorization": f"Bearer {stack.token()}"}), timeout=60).read())
    assert allowed["ti"]["task_id"] == "train_lightgbm"
    with pytest.raises(urllib.error.HTTPError) as no_search:  # allowed, but the task is no search
        urllib.request.urlopen(urllib.request.Request(stack.url + trial.format("api/"),
                                                      headers={"Authorization": f"Bearer {stack.token()}"}), timeout=60)
    assert no_search.value.code == 404
