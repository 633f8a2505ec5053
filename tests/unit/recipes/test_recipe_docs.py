"""A recipe DAG's page in the UI (issue 25 D11): its docs say what the recipe does (description, one row per
experiment), and nothing a recipe author writes is rendered as markup."""

from __future__ import annotations

import textwrap

import markdown_it

from airflow_ml_provider.recipes.dag import dag_from_recipe
from support import REPO


def html(doc_md: str) -> str:
    return markdown_it.MarkdownIt("commonmark").enable("table").render(doc_md)


def test_the_sweep_recipe_dag_documents_its_description_and_experiments():
    page = html(dag_from_recipe(REPO / "recipes" / "lightgbm_sweep.yaml").doc_md)
    assert "Synthetic data, then a 6-trial LightGBM sweep with 2 workers per trial" in page
    assert "<td>sweep</td>\n<td>lightgbm</td>\n<td>2</td>\n<td>6</td>\n<td>data</td>" in page
    assert "num_leaves: 15 or 31 or 63; learning_rate: 0.02 to 0.3 (log); rounds: 30 to 80" in page


def test_a_recipe_authors_markup_is_shown_as_text(tmp_path):
    recipe = tmp_path / "hostile.yaml"
    recipe.write_text(textwrap.dedent("""\
        version: 1
        name: hostile_docs
        description: "[log in again](https://evil.example/) <img src=x onerror=alert(1)> **urgent** | x |"
        experiments:
          train:
            framework: generic
            parameters: {p: ["[a](https://evil.example/)", "<b>x</b>"]}
            command: [python, train.py, "{{p}}"]
    """))
    page = html(dag_from_recipe(recipe).doc_md)
    assert "<a " not in page and "<img" not in page and "<strong>" not in page and "<b>" not in page, page
    assert "[log in again](https://evil.example/) &lt;img src=x onerror=alert(1)&gt; **urgent** | x |" in page
    assert page.count("<tr>") == 2, "the header and the one experiment: a '|' in a value makes no cell"
