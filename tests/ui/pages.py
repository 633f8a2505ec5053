"""How the UI tests open pages of the Airflow UI: as the app's own links do, once the app is loaded.

A full load (``page.goto``) parses and compiles the UI's JavaScript again and fetches its translations:
about 1.6 CPU s of chromium and 0.25 of the API server per page on a 2-core machine, against 0.2 and
0.03 for a move inside the loaded app (measured side by side: docs/testing.md). So a browser's first
page is a full load, and every later one a move of the app's router (React Router follows
``history.pushState`` + ``popstate``, as for the browser's back button). What a test asserts is still
what the page shows once the server's answer is on it."""

from __future__ import annotations

from urllib.parse import urlsplit

# A route the app does not have: its "Page Not Found" view fetches nothing and draws nothing while a
# test waits on the REST API (an open run page polls the API server every few seconds).
PARKED = "/parked-while-the-test-waits"
_MOVE = "path => { history.pushState({}, '', path); dispatchEvent(new PopStateEvent('popstate', {state: {}})); }"


def _in_app(page, url: str) -> bool:
    """Whether the page shows the loaded app: not its login, nor the training view's plain pages (``/ml-training``)."""
    here, there = urlsplit(page.url), urlsplit(url)
    return (here.scheme, here.netloc) == (there.scheme, there.netloc) and not here.path.startswith(("/auth", "/ml-training"))


def visit(page, url: str) -> None:
    """Open ``url``, an address of the Airflow UI: a move of the loaded app, else a full load. The caller
    waits for what it reads on the page (the move returns before the page has drawn)."""
    if _in_app(page, url):
        parts = urlsplit(url)
        page.evaluate(_MOVE, parts.path + (f"?{parts.query}" if parts.query else ""))
    else:
        page.goto(url)


def park(page) -> None:
    """Leave the live views while the test waits on the REST API: on 2 cores their polling (the API
    server's and chromium's CPU) slows the very runs the test waits for. The test opens the page it shows
    again when it shows it."""
    origin = urlsplit(page.url)
    if origin.scheme in ("http", "https"):
        visit(page, f"{origin.scheme}://{origin.netloc}{PARKED}")
        page.get_by_text("Page Not Found").first.wait_for()
    else:
        page.goto("about:blank")
