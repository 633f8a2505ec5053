"""Valid recipes: trials, argv substitution as plain data, the shipped recipes, error formatting."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_ml_provider.recipes import RecipeError, load_recipe, parse_recipe
from airflow_ml_provider.recipes.argv import ArgvTemplate
from airflow_ml_provider.recipes.model import Trial

REPO = Path(__file__).resolve().parents[3]

RECIPE = """\
version: 1
name: unit_recipe
seed: 5
experiments:
  prepare:
    framework: generic
    command: [python, prep.py]
  train:
    depends_on: [prepare]
    framework: horovod
    workers: 2
    samples: 8
    hardware: {cpu: 2, memory: 4Gi, gpu: {type: nvidia-tesla-v100, count: 1}}
    parameters:
      lr: {min: 0.001, max: 0.1, scale: log}
      batch_size: [32, 64]
      epochs: 3
      layers: {min: 1, max: 3}
    command: [python, train.py, --lr, "{{lr}}", "--batch-size={{ batch_size }}", --epochs, "{{epochs}}",
              --layers, "{{layers}}", --seed, "{{sample}}", --name, "{{experiment}}"]
"""


def test_trials_follow_the_parameter_space_and_fill_the_command():
    recipe = parse_recipe(RECIPE)
    trials = recipe.trials("train")
    assert [t.index for t in trials] == list(range(8))
    assert sorted(t.params["batch_size"] for t in trials) == [32] * 4 + [64] * 4
    for trial in trials:
        p = trial.params
        assert trial.argv == [
            "python",
            "train.py",
            "--lr",
            str(p["lr"]),
            f"--batch-size={p['batch_size']}",
            "--epochs",
            "3",
            "--layers",
            str(p["layers"]),
            "--seed",
            str(trial.index),
            "--name",
            "train",
        ]
        assert 0.001 <= p["lr"] <= 0.1 and p["layers"] in (1, 2, 3) and p["epochs"] == 3
    assert recipe.trials("train") == trials, "a recipe always yields the same trials"
    assert recipe.trials("prepare") == [Trial(0, {}, ["python", "prep.py"])]


def test_hardware_becomes_job_resources():
    resources = parse_recipe(RECIPE).experiments["train"].hardware.resources()
    assert (resources.cpu, resources.memory, resources.gpu, resources.gpu_type) == (
        2.0,
        "4Gi",
        1,
        "nvidia-tesla-v100",
    )


def test_samples_default_to_one_per_discrete_combination():
    recipe = parse_recipe(RECIPE.replace("    samples: 8\n", ""))
    assert len(recipe.trials("train")) == 2


@pytest.mark.parametrize(
    "value",
    ["; rm -rf /tmp/x", "$(touch /tmp/x)", "`touch /tmp/x`", "{{ 7 * 7 }}", "{{lr}}", "{% raw %}", "a b\nc"],
)
def test_values_are_substituted_once_as_plain_text(value):
    assert ArgvTemplate(["prog", "--v", "{{v}}", "x={{v}}"]).render({"v": value}) == [
        "prog",
        "--v",
        value,
        f"x={value}",
    ]


def test_booleans_and_numbers_are_spelled_as_in_yaml():
    assert ArgvTemplate(["p", "{{a}}", "{{b}}", "{{c}}"]).render({"a": True, "b": 0.5, "c": 3}) == [
        "p",
        "true",
        "0.5",
        "3",
    ]


def test_injection_text_in_a_recipe_is_an_ordinary_value():
    recipe = parse_recipe(RECIPE.replace("batch_size: [32, 64]", "batch_size: ['; rm -rf /', '$(id)']"))
    assert {t.argv[4] for t in recipe.trials("train")} == {"--batch-size=; rm -rf /", "--batch-size=$(id)"}


@pytest.mark.parametrize("path", sorted((REPO / "recipes").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_recipes_are_valid(path):
    recipe = load_recipe(path)
    assert all(recipe.trials(name) for name in recipe.experiments)


def test_all_errors_are_reported_together_in_file_order():
    text = RECIPE.replace("workers: 2", "workers: 0").replace(
        "depends_on: [prepare]", "depends_on: [nothing]"
    )
    text = text.replace('"{{epochs}}"', '"{{epoch}}"')
    with pytest.raises(RecipeError) as raised:
        parse_recipe(text, "r.yaml")
    assert [(i.path, i.line) for i in raised.value.issues] == [
        ("experiments.train.depends_on[0]", 9),
        ("experiments.train.workers", 11),
        ("experiments.train.parameters.epochs", 17),
        ("experiments.train.command[6]", 19),
    ]
    assert (
        str(raised.value)
        .splitlines()[0]
        .startswith("r.yaml:9: experiments.train.depends_on[0]: names no experiment")
    )
