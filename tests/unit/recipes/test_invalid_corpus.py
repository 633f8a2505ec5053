"""Every recipe in the invalid corpus is rejected, with an error naming the offending field's YAML path.

Each file states what it expects in its first two lines: ``# error: <path>`` and ``# message: <text>``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_ml_provider.recipes import RecipeError, load_recipe

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "recipes_invalid"
CASES = sorted(CORPUS.glob("*.yaml"))


def _expectation(path: Path) -> tuple[str, str]:
    error_line, message_line = path.read_text().splitlines()[:2]
    return error_line.removeprefix("# error:").strip(), message_line.removeprefix("# message:").strip()


def test_the_corpus_is_large_enough():
    assert len(CASES) >= 30


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_invalid_recipe_is_rejected_naming_the_field(path):
    expected_path, expected_message = _expectation(path)
    with pytest.raises(RecipeError) as raised:
        load_recipe(path)
    matching = [issue for issue in raised.value.issues if issue.path == expected_path]
    assert matching, f"no error at {expected_path!r}; got:\n{raised.value}"
    assert any(expected_message in issue.message for issue in matching), str(raised.value)
    lines = path.read_text().splitlines()
    for issue in matching:
        assert 1 <= issue.line <= len(lines)
        assert f"{path}:{issue.line}: {expected_path}" in str(raised.value)
