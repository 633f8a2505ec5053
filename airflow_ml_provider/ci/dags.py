"""DAG files as the DAG processor loads them (Airflow's DagBag: its file discovery, ``.airflowignore``,
import errors, cycle and policy checks), then every job a DAG's tasks would submit, built with the
DAG's default Params: training, evaluation and preprocessing tasks (mapped ones over literal values),
searches (their first trial) and recipe trials."""

from __future__ import annotations

import ast
import copy
import itertools
import os
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.definitions.mappedoperator import MappedOperator

from airflow_ml_provider.ci.context import RuntimeValue, check_context, holds_runtime, without_xcom_args
from airflow_ml_provider.ci.results import Case, relative
from airflow_ml_provider.ci.targets import Targets
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.operators.base_job import BaseJobOperator, spec_on
from airflow_ml_provider.operators.config import JobConfig
from airflow_ml_provider.operators.evaluate import EvaluateModelOperator
from airflow_ml_provider.operators.search import HyperparameterSearchOperator, trial_spec_builder
from airflow_ml_provider.operators.training import BaseTrainingOperator
from airflow_ml_provider.recipes.dag import InvalidRecipeOperator
from airflow_ml_provider.search.template import check_template, placeholder, render_trial

RUN_ID = "check"
MAX_MAPPED = 1000  # map indexes checked per mapped task (a recipe's trials are bounded by its budgets)


def load(path: Path) -> tuple[list[Case], list[Any]]:
    """Parse a DAG file or folder as the DAG processor does: a case per DAG file (its import) and per warning
    it raised, the DAGs."""
    from airflow.dag_processing.dagbag import DagBag

    # the whole stack, so that the DAG file's own line is in it however deep the error was raised
    os.environ["AIRFLOW__CORE__DAGBAG_IMPORT_ERROR_TRACEBACKS"] = "True"
    os.environ["AIRFLOW__CORE__DAGBAG_IMPORT_ERROR_TRACEBACK_DEPTH"] = "1000"
    bag = DagBag(dag_folder=str(path.resolve()))
    cases = []
    for file, error in sorted(bag.import_errors.items()):
        cases.append(Case(relative(file), "import", relative(file), _error_line(file, error), "failed",
                          _error_message(error)))
    for file, warned in sorted(bag.captured_warnings.items()):
        cases += [Case(relative(file), "import", relative(file), status="warning", message=message) for message in warned]
    for file in sorted({dag.fileloc for dag in bag.dags.values()}):
        names = sorted(dag.dag_id for dag in bag.dags.values() if dag.fileloc == file)
        cases.append(Case(relative(file), "import", relative(file), details=[f"DAGs: {', '.join(names)}"]))
    return cases, [bag.dags[dag_id] for dag_id in sorted(bag.dags)]


def check_dag(dag: Any, targets: Targets) -> list[Case]:
    """A case per job-submitting task (per map index of a mapped one), or the DAG's Params' refusal."""
    file = relative(dag.fileloc)
    try:
        params = dag.params.validate()
    except Exception as exc:  # noqa: BLE001 - ParamValidationError or a Param without a default
        return [Case(dag.dag_id, "params", file, _dag_line(dag.fileloc, dag.dag_id), "failed",
                     f"the DAG's default Params do not validate: {exc}")]
    cases = []
    for task in dag.tasks:
        line = _task_line(dag.fileloc, dag.dag_id, task.task_id) or _dag_line(dag.fileloc, dag.dag_id)
        if _is(task, InvalidRecipeOperator):
            cases.extend(_invalid_recipe(dag, task))
            continue
        if not _is(task, BaseJobOperator, HyperparameterSearchOperator):
            continue
        for index, operator in _unmapped(task):
            case = Case(dag.dag_id, task.task_id if index < 0 else f"{task.task_id}[{index}]", file, line)
            if operator is None:
                case.status, case.message = "skipped", "mapped over an upstream task's result: known at run time"
            else:
                _check_task(dag, operator, params, index, targets, case)
            cases.append(case)
    return cases


def _check_task(dag: Any, task: BaseOperator, params: dict[str, Any], index: int, targets: Targets,
                case: Case) -> None:
    operator = copy.copy(task)
    for name in operator.template_fields:
        setattr(operator, name, without_xcom_args(getattr(operator, name)))
    identity = JobIdentity(dag.dag_id, task.task_id, RUN_ID, index)
    try:
        # Jinja only (BaseOperator's): the operators' own rendering would also read connections
        BaseOperator.render_template_fields(operator, check_context(dag, operator, params, RUN_ID, index))
        if isinstance(operator, HyperparameterSearchOperator):
            case.details = _check_search(dag, operator, params, identity, targets)
        else:
            if isinstance(operator, EvaluateModelOperator) and not isinstance(operator.training, dict):
                operator.training = RuntimeValue(f"XCom of {operator.training}")  # the training task's result
            later = _whole_at_run_time(operator)
            backend = targets.backend(targets.name(operator.job.get("backend")))
            spec = spec_on(operator, backend, identity.name)  # of the rendered fields
            case.details = _send(targets, backend, identity, spec) + [
                f"job.{key}: an upstream task's result, known at run time: checked without it" for key in later]
    except Exception as exc:  # noqa: BLE001 - every refusal is a finding, named by its field
        runtime = [name for name in operator.template_fields if holds_runtime(getattr(operator, name, None))]
        if runtime and not isinstance(exc, _Refused):
            case.status = "skipped"
            case.message = f"{', '.join(runtime)} known only at run time ({_one_line(exc)})"
        else:
            case.status, case.message = "failed", _one_line(exc)


def _whole_at_run_time(operator: BaseJobOperator) -> list[str]:
    """Leaves out of the job config, and names, the options (env, resources, scheduling, kubernetes: not the
    strings) that an upstream task's result gives whole, e.g. the placement a DAG's first task checked
    from its Params; the rest of the job is still built and checked."""
    later = [key for key, value in operator.job.items() if isinstance(value, str) and holds_runtime(value)
             and not isinstance(JobConfig.model_fields[key].default, (str, type(None)))]
    operator.job = {key: value for key, value in operator.job.items() if key not in later}
    return later


class _Refused(Exception):
    """The backend (or the API server) refused a job that was built: a finding even when its argv holds a
    value known only at run time."""


def _send(targets: Targets, backend: Any, identity: JobIdentity, spec: Any) -> list[str]:
    try:
        return targets.check(backend, identity.name, spec, identity.labels())
    except Exception as exc:  # noqa: BLE001 - kept as the refusal's own message
        raise _Refused(_one_line(exc)) from exc


def _check_search(dag: Any, search: HyperparameterSearchOperator, params: dict[str, Any], identity: JobIdentity,
                  targets: Targets) -> list[str]:
    """What the search task checks before its first trial, then its first trial's job (each parameter at
    its first grid value or lower bound) rendered for the backend."""
    setup = search.search_setup()
    space, settings = setup.space, setup.settings
    search.check_trial_budget(settings, space)
    trial = search.trial
    if isinstance(trial, BaseTrainingOperator):
        trial = copy.copy(trial)
        for name in trial.template_fields:
            setattr(trial, name, without_xcom_args(getattr(trial, name)))
        placeholders = {**params, **{name: placeholder(name) for name in space.params}}
        BaseOperator.render_template_fields(trial, check_context(dag, search, placeholders, RUN_ID))
    elif isinstance(trial, dict):
        placeholders = {**params, **{name: placeholder(name) for name in space.params}}
        trial = search.render_template(trial, check_context(dag, search, placeholders, RUN_ID))
    trial_backend = trial.job.get("backend") if isinstance(trial, BaseTrainingOperator) else None
    backend = targets.backend(targets.name(search.backend or trial_backend))
    template = trial_spec_builder(trial, search.hook.job_setup(backend))
    first = JobIdentity(identity.dag_id, identity.task_id, RUN_ID, identity.map_index, trial=0)
    check_template(template(first.name), space)
    values = {name: (param.grid() or [getattr(param, "low", None)])[0] for name, param in space.params.items()}
    return _send(targets, backend, first, render_trial(template(first.name), values))


def _unmapped(task: Any) -> Iterator[tuple[int, BaseOperator | None]]:
    """(map index, operator) for each literal value a mapped task expands over; (-1, task) for a plain task;
    (-1, None) when the values come from an upstream task (known at run time)."""
    if not isinstance(task, MappedOperator):
        yield -1, task
        return
    expand = task._get_specified_expand_input().value
    if isinstance(expand, dict) and all(isinstance(v, list | tuple | dict) for v in expand.values()):
        keys = list(expand)
        combos = itertools.product(*(list(expand[k].items()) if isinstance(expand[k], dict) else expand[k]
                                     for k in keys))
        kwargs = (dict(zip(keys, combo, strict=True)) for combo in combos)
    elif isinstance(expand, list | tuple) and all(isinstance(item, dict) for item in expand):
        kwargs = iter(expand)
    else:
        yield -1, None
        return
    for index, values in enumerate(itertools.islice(kwargs, MAX_MAPPED)):
        yield index, task.unmap(values)


def _is(task: Any, *classes: type) -> bool:
    kind = task.operator_class if isinstance(task, MappedOperator) else type(task)
    return isinstance(kind, type) and issubclass(kind, classes)


def _invalid_recipe(dag: Any, task: Any) -> list[Case]:
    """A recipe file that does not load (the placeholder DAG of ``dags_from_folder``): one case per error,
    at the recipe's own file and line."""
    cases = []
    for text in task.errors.splitlines():
        if match := re.match(r"(?P<file>.+?):(?P<line>\d+): (?P<message>.*)", text):
            cases.append(Case(dag.dag_id, "recipe", relative(match["file"]), int(match["line"]), "failed",
                              match["message"]))
        elif text.strip():
            cases.append(Case(dag.dag_id, "recipe", relative(dag.fileloc), 1, "failed", text.strip()))
    return cases


def _error_line(file: str, error: str) -> int:
    """The innermost line of ``file`` in an import error's traceback (a SyntaxError's own line too)."""
    lines = [int(m[1]) for m in re.finditer(rf'File "{re.escape(file)}", line (\d+)', error)]
    return lines[-1] if lines else 1


def _error_message(error: str) -> str:
    """The exception's own line: the traceback's last non-empty line."""
    lines = [line for line in error.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else error


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


@cache
def _tree(file: str) -> ast.AST | None:
    try:
        return ast.parse(Path(file).read_text())
    except (OSError, SyntaxError, ValueError):
        return None


def _task_line(file: str, dag_id: str, task_id: str) -> int | None:
    """Where the task is defined: a call with ``task_id="<id>"``, else a function of that name (TaskFlow),
    looked for in the ``with DAG("<dag_id>", ...)`` block when the file has one."""
    tree = _tree(file)
    if tree is None:
        return None
    blocks = [node for node in ast.walk(tree) if isinstance(node, ast.With) and any(
        isinstance(sub, ast.Constant) and sub.value == dag_id for item in node.items for sub in ast.walk(item))]
    lines = []
    for block in blocks or [tree]:
        for node in ast.walk(block):
            if isinstance(node, ast.Call) and any(
                kw.arg == "task_id" and isinstance(kw.value, ast.Constant) and kw.value.value == task_id
                for kw in node.keywords
            ) or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == task_id:
                lines.append(node.lineno)
    return min(lines, default=None)


def _dag_line(file: str, dag_id: str) -> int:
    tree = _tree(file)
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Constant) and node.value == dag_id:
            return node.lineno
    return 1
