"""The documentation builds as `make docs` builds it (Sphinx + MyST, warnings are errors), a broken internal
link stops it, the generated reference matches the provider's metadata, the examples come from the real
DAG files, and the README's links all resolve inside the repository."""

from __future__ import annotations

import html
import re
import runpy
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest

import airflow_ml_provider
from airflow_ml_provider.get_provider_info import DOCS_URL, get_provider_info
from support import REPO

SPHINX = REPO / ".venv-docs" / "bin" / "sphinx-build"


def _text(page: Path) -> str:
    """A built page's text, tags and highlighting spans removed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", page.read_text())).split())


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("docs-html")
    done = subprocess.run(["make", "-s", "docs", f"DOCS_OUT={out}"], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stdout + done.stderr
    return out


def test_configuration_page_is_generated_from_the_declared_config(built):
    text = _text(built / "configuration.html")
    for name, option in get_provider_info()["config"]["ml_training"]["options"].items():
        assert " ".join(option["description"].split()) in text, name
        assert f"AIRFLOW__ML_TRAINING__{name.upper()}" in text


def test_the_reference_tables_are_in_the_markdown_a_reader_opens():
    """A pip user reads the pages in the repository (issue 40: they held `<!-- generated -->` placeholders):
    docs/reference.py writes the tables into them from the provider's metadata, and a page that differs from
    what it would write now fails here (run `python docs/reference.py` after changing a setting or an extra)."""
    reference = runpy.run_path(str(REPO / "docs" / "reference.py"))
    for page in reference["PAGES"]:
        text = (REPO / "docs" / page).read_text()
        assert reference["render"](text) == text, f"docs/{page} is out of date: run python docs/reference.py"
    assert "`AIRFLOW__ML_TRAINING__LOCAL_JOB_MEMORY_MB`" in (REPO / "docs" / "configuration.md").read_text()
    assert "| `local_sandbox` | Local: job sandbox |" in (REPO / "docs" / "connections.md").read_text()


def test_connections_page_lists_every_declared_extra(built):
    text = _text(built / "connections.html")
    for conn in get_provider_info()["connection-types"]:
        for name, field in conn["conn-fields"].items():
            assert f"{name} {field['label']}" in text, (conn["connection-type"], name)


def test_examples_are_cut_from_the_real_dags(built):
    text = _text(built / "operators.html")
    quickstart = (REPO / "dags" / "ml_quickstart.py").read_text()
    shown = re.search(r"    horovod = HorovodTrainingOperator\(.*?\n    \)\n", quickstart, re.DOTALL).group(0)
    assert " ".join(shown.split()) in text
    assert 'task_id="deploy"' in text and 'ElasticsearchLogSensor(task_id="watch"' in text


def test_one_version_in_the_docs(built):
    assert f"airflow-ml-provider {airflow_ml_provider.__version__}" in _text(built / "index.html")
    assert f"## {airflow_ml_provider.__version__}" in (REPO / "CHANGELOG.md").read_text()


def test_a_broken_internal_link_stops_the_build(tmp_path):
    """The same tree with one link to a missing page and one to a missing heading."""
    for name in ("airflow_ml_provider", "dags", "tests", "CHANGELOG.md"):
        (tmp_path / name).symlink_to(REPO / name)
    shutil.copytree(REPO / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("_build"))
    with (tmp_path / "docs" / "index.md").open("a") as page:
        page.write("\n[gone](no-such-page.md) and [moved](quickstart.md#no-such-heading)\n")
    done = subprocess.run([SPHINX, "-q", "-W", "--keep-going", "-n", "-b", "html", tmp_path / "docs", tmp_path / "out"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode != 0
    assert "no-such-page.md" in done.stderr and "no-such-heading" in done.stderr


def _github_slug(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_readme_links_resolve_inside_the_repository():
    readme = (REPO / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        if urlparse(link).scheme in ("http", "https"):
            continue
        path, _, anchor = link.partition("#")
        target = (REPO / path).resolve() if path else REPO / "README.md"
        assert target.is_relative_to(REPO) and target.exists(), link
        if anchor and target.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", target.read_text(), re.MULTILINE)
            assert anchor in {_github_slug(h) for h in headings}, link
    assert "../" not in readme


def test_the_documentation_url_is_a_page_of_the_repository():
    path = urlparse(DOCS_URL).path.split("/blob/main/", 1)[1]
    assert (REPO / path).is_file()
    setup = (REPO / "setup.cfg").read_text()
    assert f"Documentation = {DOCS_URL}" in setup


def test_no_file_of_the_project_points_outside_the_repository():
    tracked = subprocess.run(["git", "grep", "-n", r"\.\./shared"], cwd=REPO, capture_output=True, text=True)
    assert tracked.stdout == "", tracked.stdout  # the CRDs come from requirements/crds.lock


def test_the_readmes_api_example_builds_its_dag_importing_no_follow_core():
    """The README's "taste of the API" is real code: run as a DAG file in a fresh interpreter it builds both
    tasks, and (parse-time cost, issue 26) imports neither the follow core nor a training framework."""
    example = re.search(r"## A taste of the API\s+```python\n(.*?)```", (REPO / "README.md").read_text(), re.S)[1]
    probe = example + (
        "\nimport sys\nprint(sorted(task.task_id for task in dag.tasks))\n"
        "print(sorted(m for m in ('airflow_ml_provider.jobs.follow', 'tensorflow', 'torch', 'lightgbm')"
        " if m in sys.modules))\n"
    )
    probe = probe.replace('with DAG(dag_id="train", schedule=None):', 'with DAG(dag_id="train", schedule=None) as dag:')
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    tasks, heavy = result.stdout.strip().splitlines()[-2:]
    assert tasks == "['train_horovod', 'train_lightgbm']"
    assert heavy == "[]"


def test_the_readme_and_the_design_notes_name_every_backend_and_framework_registered():
    """The README's backend table is the package's: each registered backend, with the frameworks it runs (a
    backend or framework added without a word in the docs fails here), and the design notes name them all."""
    from airflow_ml_provider.jobs.backends import BACKENDS, backends_for
    from airflow_ml_provider.jobs.spec import Framework

    rows = re.findall(r"^\| `([a-z-]+)`[^|]*\|[^|]*\| ([a-z, -]+) \|$", (REPO / "README.md").read_text(), re.M)
    table = {backend: set(frameworks.split(", ")) for backend, frameworks in rows}
    registered = {backend: {f.value for f in Framework if backend in backends_for(f.value)} for backend in BACKENDS}
    assert table == registered
    design = (REPO / "docs" / "design.md").read_text()
    assert [name for name in [*BACKENDS, *(f.value for f in Framework)] if f"`{name}`" not in design] == []


def test_the_training_view_page_shows_the_view(built):
    """Issue 45: docs/training_view.md, with a screenshot of the view (tests/ui/test_training_view.py takes it)."""
    page = (built / "training_view.html").read_text()
    assert re.search(r'<img alt="The training view of a LightGBM job, the Training tab of its task instance" src="_images/training_view.png"', page)
    assert (built / "_images" / "training_view.png").stat().st_size > 10_000
    assert "lazy_discover_providers = False" in _text(built / "training_view.html")
