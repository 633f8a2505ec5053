"""Debian's chromium-headless-shell driven by playwright, logged in to the module's deployment
(tests/deployments.py: a real Airflow deployment serving the shipped DAGs, the MLflow UI over its registry)."""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path

import pytest
from airflow_stack import AirflowStack

CHROMIUM = Path("/usr/bin/chromium-headless-shell")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Debian's headless chromium; the browser tests skip only where it is absent (``make test`` installs it)."""
    if not CHROMIUM.exists():
        pytest.skip(f"no chromium at {CHROMIUM} (Debian's chromium-headless-shell; `make chromium` installs it)")
    return CHROMIUM


@pytest.fixture(scope="module")
def screenshots(request, tmp_path_factory) -> Path:
    """Where the tests leave screenshots for a person to look at (``$AIRFLOW_ML_SCREENSHOTS`` or a tmp dir)."""
    folder = Path(os.environ.get("AIRFLOW_ML_SCREENSHOTS") or tmp_path_factory.mktemp("ui") / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"\nUI screenshots: {folder}")
    return folder


@pytest.fixture(scope="module")
def page(chromium, deployments, deployment, dag_files, serves_mlflow_ui):
    """A logged-in browser page on the deployment, one per deployment: the files that share a deployment
    share its browser too (each module opens its pages afresh, ``pages.visit``)."""
    return deployments.attach(dag_files, serves_mlflow_ui, "page", functools.partial(_logged_in_page, chromium))


@contextlib.contextmanager
def _logged_in_page(chromium: Path, stack: AirflowStack):
    """A browser page logged in through the login form, with the deployment's admin credentials."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium), args=CHROMIUM_FLAGS)
        context = browser.new_context(viewport={"width": 1500, "height": 1000})
        page = context.new_page()
        page.set_default_timeout(120_000)
        page.goto(f"{stack.url}/")
        username, password = stack.credentials
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(lambda url: "/auth/login" not in url)
        yield page
        browser.close()
