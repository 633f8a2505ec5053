"""A DAG's trigger form in the Airflow UI, opened and filled as a person does (one way for every UI test)."""

from __future__ import annotations

import re
from urllib.parse import unquote

from pages import park, visit


def open_trigger_form(page, stack, dag_id: str):
    """The DAG page's Trigger dialog, once its Params are shown: a fresh form (the DAG page is opened
    anew, from the parked page, so nothing an earlier test typed is kept)."""
    park(page)
    visit(page, f"{stack.url}/dags/{dag_id}")
    page.get_by_role("button", name="Trigger").first.click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_text("Run Parameters").wait_for()
    return dialog


def trigger_from_form(page, stack, dag_id: str, fields=(), choices=(), switches=()) -> str:
    """Fill the DAG's trigger form (text/number ``fields``, select ``choices`` by their shown label, boolean
    ``switches`` turned on), press Trigger; returns the run id of the run page it opens, and leaves that
    page (``park``) for the caller's wait."""
    dialog = open_trigger_form(page, stack, dag_id)
    for name, label in choices:
        dialog.locator(f"#element_{name}").click()
        page.get_by_role("option", name=label).click()
    for name, value in fields:
        dialog.locator(f"input[name='element_{name}']").fill(str(value))
    for name in switches:
        dialog.locator(f"[id='switch:element_{name}']").click()
        assert dialog.locator(f"input[name='element_{name}']").is_checked(), name
    dialog.get_by_role("button", name="Trigger").click()
    run_id = opened_run_id(page, dag_id)
    park(page)
    return run_id


def opened_run_id(page, dag_id: str) -> str:
    """The run id of the run page that pressing the form's Trigger opens, once it is open."""
    page.wait_for_url(re.compile(rf"/dags/{dag_id}/runs/[^/]+$"))
    return unquote(page.url.rsplit("/", 1)[1])

