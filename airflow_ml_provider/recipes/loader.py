"""Reading a recipe: YAML -> validated Recipe, or every error at once with its YAML path and line.

Three passes, all reported together: the YAML itself (syntax, duplicate keys), the schema
(pydantic, whose error locations become paths such as ``experiments.train.workers``), and rules
across fields (placeholders, dependencies) checked on the raw document so they are found even
when the schema pass failed too. No Airflow here: ``airflow-ml validate`` runs in CI without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from airflow_ml_provider.jobs.spec import SpecError, TrainingJobSpec
from airflow_ml_provider.recipes.argv import IDENTIFIER, JINJA_SYNTAX, placeholders
from airflow_ml_provider.recipes.budgets import Budgets
from airflow_ml_provider.recipes.model import (
    BUILTINS,
    PARAMS_PREFIX,
    Best,
    Experiment,
    Gpu,
    Hardware,
    RangeSpec,
    Recipe,
    RecipeParam,
    Search,
)
from airflow_ml_provider.recipes.safe_yaml import RecipeFileError, compose_and_load, format_path, read_text

_UNION_TAGS = {"values", "range"}  # pydantic adds the chosen union member to error locations
_MODELS = (Recipe, Experiment, Hardware, Gpu, RangeSpec, Search, Best, RecipeParam)
_FIELDS = sorted({field for model in _MODELS for field in model.model_fields})  # for "did you mean" hints

Loc = tuple[str | int, ...]


@dataclass(frozen=True, order=True)
class Issue:
    """One problem: where (line, YAML path) and what."""

    line: int
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.line}: {self.path or '<document>'}: {self.message}"


class RecipeError(ValueError):
    """A recipe is invalid; ``issues`` lists every problem found, in file order."""

    def __init__(self, source: str, issues: list[Issue]):
        self.source = source
        self.issues = sorted(issues)
        super().__init__("\n".join(f"{source}:{issue}" for issue in self.issues))


def load_recipe(path: str | Path, budgets: Budgets | None = None) -> Recipe:
    """Read and validate a recipe file (within ``budgets``, by default the configured ones).
    Raises RecipeError (or OSError if it cannot be opened)."""
    return parse_recipe(read_recipe_text(path), str(path), budgets)


def read_recipe_text(path: str | Path) -> str:
    """The text of a recipe file read by the file rules (a regular file, no symlink, bounded size, UTF-8).
    Raises RecipeError (or OSError if it cannot be opened)."""
    try:
        return read_text(Path(path))
    except RecipeFileError as exc:
        raise RecipeError(str(path), [Issue(exc.line, exc.path, str(exc))]) from None


def parse_recipe(text: str, source: str = "<recipe>", budgets: Budgets | None = None) -> Recipe:
    """Validate recipe text (within ``budgets``, by default the configured ones). Raises RecipeError listing
    every problem with its path and line."""
    try:
        root, data = compose_and_load(text)
    except RecipeFileError as exc:
        raise RecipeError(source, [Issue(exc.line, exc.path, str(exc))]) from None
    if not isinstance(data, dict):
        raise RecipeError(source, [Issue(1, "", "a recipe is a mapping with version, name and experiments")])
    issues = [_issue(root, loc, message) for loc, message in _duplicate_keys(root)]
    recipe = None
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        issues += [_issue(root, error["loc"], _message(error)) for error in exc.errors()]
    issues += [_issue(root, loc, message) for loc, message in cross_field_problems(data)]
    if recipe is not None:  # arithmetic on the validated counts: nothing is expanded yet
        issues += [_issue(root, loc, message)
                   for loc, message in budget_problems(recipe, budgets or Budgets.from_config())]
    if recipe is not None and not issues:
        issues += [_issue(root, loc, message) for loc, message in _spec_problems(recipe)]
    if issues:
        raise RecipeError(source, redacted(issues, data))
    return recipe


def redacted(issues: list[Issue], data: Any) -> list[Issue]:
    """The issues with every string value of the document that a message quotes (its repr) replaced by ``<value>``:
    error texts (task logs, the placeholder DAG's docs) carry YAML paths and rules, never the file's
    content, whichever check (ours, pydantic's, the job spec's) wrote the message."""
    values, stack = set(), [data]
    while stack:  # iterative: composition bounded the document's size and depth
        item = stack.pop()
        if isinstance(item, dict):
            stack += item.values()
        elif isinstance(item, list):
            stack += item
        elif isinstance(item, str) and item:
            values.add(item)
    quoted = sorted(values, key=len, reverse=True)
    result = []
    for issue in issues:
        message = issue.message
        for value in quoted:
            if value in message:  # checks quote a value as its repr
                message = message.replace(repr(value), "<value>")
        result.append(Issue(issue.line, issue.path, message))
    return result


def budget_problems(recipe: Recipe, budgets: Budgets) -> list[tuple[Loc, str]]:
    """Trials per search (in all and at once) and jobs per file over their budgets, counted from ``samples`` and the sizes of the
    parameter values (a product, never materialized), so a recipe of millions of jobs is refused at once."""
    problems = []
    for name, experiment in recipe.experiments.items():
        if experiment.search is not None and experiment.num_samples > budgets.max_search_trials:
            problems.append((("experiments", name, "samples"),
                             f"a search of {experiment.num_samples} trials is over the budget of "
                             f"{budgets.max_search_trials} ({Budgets.key('max_search_trials')})"))
        if experiment.search is not None and (experiment.parallel or 1) > budgets.search_max_parallel:
            problems.append((("experiments", name, "parallel"),
                             f"{experiment.parallel} trial jobs at once is more than the "
                             f"{budgets.search_max_parallel} allowed per search ({Budgets.key('search_max_parallel')})"))
    if recipe.num_jobs > budgets.max_jobs_per_file:
        problems.append((("experiments",), f"the recipe creates {recipe.num_jobs} jobs, over the budget of "
                                           f"{budgets.max_jobs_per_file} per recipe file "
                                           f"({Budgets.key('max_jobs_per_file')})"))
    return problems


def cross_field_problems(data: dict) -> list[tuple[Loc, str]]:
    """Placeholders that name no parameter or Param, unused parameters and Params, unknown or cyclic
    dependencies."""
    experiments = data.get("experiments")
    if not isinstance(experiments, dict):
        return []
    params = set(data["params"]) if isinstance(data.get("params"), dict) else set()
    problems, used = [], set()
    for name, experiment in experiments.items():
        if isinstance(experiment, dict):
            problems += _placeholder_problems(("experiments", name), experiment, params, used)
            problems += _dependency_problems(("experiments", name), experiment, experiments)
    problems += [(("params", name), f"Param {name!r} is never used in a command ({{{{params.{name}}}}})")
                 for name in sorted(params - used, key=str)]
    return problems + _cycle_problems(experiments)


def _param_problem(ref: str, params: set, used: set) -> str | None:
    """What is wrong with a ``{{params.<name>}}`` placeholder (None: it names a Param of the recipe)."""
    name = ref.removeprefix(PARAMS_PREFIX)
    if name in params:
        used.add(name)
        return None
    known = ", ".join(sorted(map(str, params))) or "none; declare them under params:"
    return f"a placeholder names no Param of this recipe (known: {known})"


def _placeholder_problems(at: Loc, experiment: dict, params: set, used_params: set) -> list[tuple[Loc, str]]:
    parameters = experiment.get("parameters")
    declared = set(parameters) if isinstance(parameters, dict) else set()
    problems = [((*at, "parameters", name), f"{name!r} is reserved for the built-in placeholder "
                                            f"{{{{{name}}}}}") for name in declared & set(BUILTINS)]
    command = experiment.get("command")
    if not isinstance(command, list):
        return problems
    used = set()
    for index, argument in enumerate(command):
        if not isinstance(argument, str):
            continue
        where = (*at, "command", index)
        if JINJA_SYNTAX.search(argument):
            problems.append((where, "Jinja statements and comments ({% %}, {# #}) are not supported: "
                                    "commands only substitute {{parameter}} placeholders"))
        for ref in placeholders(argument):
            used.add(ref)
            if index == 0:
                problems.append((where, "the program (first element) cannot be a placeholder"))
            elif ref.startswith(PARAMS_PREFIX) and IDENTIFIER.match(ref.removeprefix(PARAMS_PREFIX)):
                if problem := _param_problem(ref, params, used_params):
                    problems.append((where, problem))
            elif not IDENTIFIER.match(ref):
                problems.append((where, "a {{...}} that is not a placeholder: only {{name}} of a parameter is "
                                        "substituted; expressions are never evaluated"))
            elif ref not in declared and ref not in BUILTINS:
                known = ", ".join(sorted(declared | set(BUILTINS)))
                problems.append((where, f"a placeholder names no parameter of this experiment (known: {known})"))
    problems += [((*at, "parameters", name), f"parameter {name!r} is never used in the command")
                 for name in sorted(declared - used - set(BUILTINS))]
    return problems


def _dependency_problems(at: Loc, experiment: dict, experiments: dict) -> list[tuple[Loc, str]]:
    depends_on = experiment.get("depends_on")
    if not isinstance(depends_on, list):
        return []
    problems = []
    for index, dependency in enumerate(depends_on):
        if dependency == at[-1]:
            problems.append(((*at, "depends_on", index), "an experiment cannot depend on itself"))
        elif isinstance(dependency, str) and dependency not in experiments:
            known = ", ".join(map(str, experiments))
            message = f"names no experiment of this recipe (known: {known})"
            problems.append(((*at, "depends_on", index), message))
    return problems


def _cycle_problems(experiments: dict) -> list[tuple[Loc, str]]:
    """Report each dependency cycle once, at the first experiment on it (in file order)."""
    graph = {}
    for name, experiment in experiments.items():
        depends_on = experiment.get("depends_on") if isinstance(experiment, dict) else None
        if isinstance(depends_on, list):
            graph[name] = [d for d in depends_on if isinstance(d, str) and d in experiments and d != name]
    problems, reported = [], set()
    for start in graph:
        cycle = _find_cycle(start, graph)
        if cycle and not set(cycle) & reported:
            reported |= set(cycle)
            problems.append((("experiments", cycle[0], "depends_on"),
                             f"dependency cycle: {' -> '.join([*cycle, cycle[0]])}"))
    return problems


def _find_cycle(start: str, graph: dict[str, list[str]]) -> list[str] | None:
    stack = [(start, [start])]
    while stack:
        node, path = stack.pop()
        for nxt in graph.get(node, []):
            if nxt == start:
                return path
            if nxt not in path:
                stack.append((nxt, [*path, nxt]))
    return None


def _spec_problems(recipe: Recipe) -> list[tuple[Loc, str]]:
    """Build each experiment's job spec: what the training operator would reject, validate rejects.
    (The template stands in for the argv: placeholders never occur in the program, all the spec checks.)"""
    problems = []
    for name, experiment in recipe.experiments.items():
        try:
            TrainingJobSpec(framework=experiment.job_framework, command=experiment.command,
                            num_workers=experiment.workers, image=experiment.image,
                            resources=experiment.hardware.resources(), env=experiment.env)
        except SpecError as exc:
            problems.append((("experiments", name), str(exc)))
    return problems


def _duplicate_keys(node: yaml.Node, at: Loc = ()) -> list[tuple[Loc, str]]:
    """PyYAML keeps the last of repeated keys silently; a recipe with one is almost always a mistake."""
    problems = []
    if isinstance(node, yaml.MappingNode):
        first_line: dict[str, int] = {}
        for key, value in node.value:
            if key.value in first_line:
                problems.append(((*at, key.value), f"duplicate key {key.value!r}: the one on line "
                                                   f"{first_line[key.value]} is silently ignored"))
            first_line.setdefault(key.value, key.start_mark.line + 1)
            problems += _duplicate_keys(value, (*at, key.value))
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            problems += _duplicate_keys(item, (*at, index))
    return problems


def _message(error: dict) -> str:
    kind, message = error["type"], error["msg"].removeprefix("Value error, ")
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        import difflib  # only for a misspelled field: not imported by every parse

        field = error["loc"][-1]
        close = difflib.get_close_matches(str(field), _FIELDS, n=1)
        return f"unknown field {field!r}" + (f"; did you mean {close[0]!r}?" if close else "")
    return message  # never the input: error texts quote the YAML path and the rule, not the file's content


def _issue(root: yaml.Node, loc: Loc, message: str) -> Issue:
    """Map a pydantic location onto the YAML tree: its path in the document and the line it is on."""
    node, parts, line = root, [], root.start_mark.line + 1
    for position, part in enumerate(loc):
        found = _child(node, part)
        if found is not None:
            line, node = found
            parts.append(part)
        elif position == len(loc) - 1 and part not in _UNION_TAGS and part != "[key]":
            parts.append(part)  # a missing field: name it at its parent's line
    return Issue(line, format_path(parts), message)


def _child(node: yaml.Node, part: str | int) -> tuple[int, yaml.Node] | None:
    if isinstance(node, yaml.MappingNode):
        for key, value in reversed(node.value):  # of repeated keys, the last one counts (as in PyYAML)
            if key.value == str(part):
                return key.start_mark.line + 1, value
    elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        item = node.value[part]
        return item.start_mark.line + 1, item
    return None
