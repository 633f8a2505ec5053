"""`airflow-ml`: the provider's command line, usable without Airflow running or a cluster."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import TYPE_CHECKING

from airflow_ml_provider.jobs.backends import BACKENDS, get_backend
from airflow_ml_provider.jobs.backends.base import JobSubmissionError
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.spec import Framework, SpecError, TrainingJobSpec

if TYPE_CHECKING:
    from airflow_ml_provider.ci.results import Recipes


def _render(args: argparse.Namespace) -> int:
    """Print what a backend would run or create for a job, without running it."""
    try:
        size = ({"roles": {"chief": {}, "ps": {"count": args.ps}, "worker": {"count": args.workers}}}
                if args.framework == Framework.TENSORFLOW_PS.value else {"num_workers": args.workers})
        spec = TrainingJobSpec(framework=args.framework, command=args.command, image=args.image, **size)
    except SpecError as exc:
        print(f"airflow-ml render: {exc}", file=sys.stderr)
        return 2
    identity = JobIdentity(args.dag_id, args.task_id, args.run_id)
    try:
        print(_backend(args.backend, args).render(identity.name, spec, identity.labels()))
    except JobSubmissionError as exc:
        print(f"airflow-ml render: {exc}", file=sys.stderr)
        return 2
    return 0


def _backend(name: str, args: argparse.Namespace):
    # rendering needs no cluster: Kubernetes backends only build manifests here
    config = {"root": args.local_root} if name == "local" else {"api_client": None, "namespace": args.namespace}
    return get_backend(name, **config)


def _validate(args: argparse.Namespace) -> int:
    """Check recipes: every error with its file, line and YAML path; exit 1 if any recipe is invalid."""
    from airflow_ml_provider.recipes import RecipeError, load_recipe
    from airflow_ml_provider.recipes.budgets import Budgets

    failed, budgets = 0, Budgets.from_config()
    for path in args.recipes:
        try:
            recipe = load_recipe(path, budgets)
        except (RecipeError, OSError) as exc:
            print(exc, file=sys.stderr)
            failed += 1
            continue
        print(f"{path}: ok (DAG {recipe.dag_id}: {len(recipe.experiments)} tasks, {recipe.num_jobs} jobs)")
    return 1 if failed else 0


def _render_recipe(args: argparse.Namespace) -> int:
    """Print a recipe's tasks and each trial's job manifest (``--backend`` where the recipe names none)."""
    from airflow_ml_provider.recipes import RecipeError, load_recipe
    from airflow_ml_provider.recipes.render import render_recipe

    try:
        recipe = load_recipe(args.command[0])
    except (RecipeError, OSError) as exc:
        print(exc, file=sys.stderr)
        return 2
    print(render_recipe(recipe, lambda name: _backend(name or args.backend, args), args.run_id, args.max_trials))
    return 0


def _check(args: argparse.Namespace) -> int:
    """Check DAG files, folders and recipes for CI: imports, every job's spec with default Params, every job
    rendered for its backend (optionally dry-run on a cluster); exit 1 on any finding."""
    from pathlib import Path

    paths = [Path(path) for path in args.paths]
    if missing := [str(path) for path in paths if not path.exists()]:
        print(f"airflow-ml check: no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    from airflow_ml_provider.ci import results
    from airflow_ml_provider.ci.targets import Targets

    targets = Targets(args.backend, args.server_dry_run, args.namespace)
    with _stdout_to_stderr():  # Airflow's and the DAG files' output: stdout is the report's
        cases, recipes = _checked(paths, targets)
    render = {"text": results.as_text, "json": results.as_json, "junit": results.as_junit}[args.format]
    report = render(cases, recipes)
    if args.output:
        Path(args.output).write_text(report + "\n")
        print(results.as_text(cases, recipes))
    else:
        print(report)
    return 1 if results.findings(cases) else 0


@contextlib.contextmanager
def _stdout_to_stderr():
    """Send whatever is written to standard output meanwhile to standard error, at the file descriptor: Airflow's
    log handlers hold the stdout stream they were configured with (an import error's traceback among their
    lines), which ``contextlib.redirect_stdout`` does not reach, and a DAG file may print."""
    sys.stdout.flush()
    report = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(report, 1)
        os.close(report)


def _checked(paths, targets) -> tuple[list, Recipes]:
    """The cases of every path, and how many recipes were found (a recipes folder gone missing shows as 0)."""
    from airflow_ml_provider.ci.dags import check_dag, load
    from airflow_ml_provider.ci.recipes import check_recipe, is_recipe
    from airflow_ml_provider.ci.results import Recipes

    cases, found = [], Recipes()
    for path in paths:
        recipes = sorted([*path.glob("*.yaml"), *path.glob("*.yml")]) if path.is_dir() else [path] * is_recipe(path)
        for recipe in recipes:
            cases += check_recipe(recipe, targets)
        found.files += len(recipes)
        if path.is_dir() or path.suffix == ".py":
            loaded, dags = load(path)
            cases += loaded
            found.dags += sum("recipe" in dag.tags for dag in dags)
            for dag in dags:
                cases += check_dag(dag, targets)
    return cases, found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="airflow-ml", description=__doc__)
    commands = parser.add_subparsers(dest="command_name", required=True)
    render = commands.add_parser("render", help=_render.__doc__)
    render.add_argument("--backend", default="local", choices=sorted(BACKENDS))
    render.add_argument("--framework", default="horovod", choices=[framework.value for framework in Framework])
    render.add_argument("--workers", type=int, default=2)
    render.add_argument("--ps", type=int, default=1, help="tensorflow-ps: its parameter servers (and a chief)")
    render.add_argument("--image", default=None)
    render.add_argument("--dag-id", default="dag")
    render.add_argument("--task-id", default="train")
    render.add_argument("--run-id", default="manual")
    render.add_argument("--local-root", default="./ml")
    render.add_argument("--namespace", default="default")
    render.add_argument("--max-trials", type=int, default=None, help="with a recipe: jobs shown per task")
    render.add_argument("command", nargs=argparse.REMAINDER, help="the worker argv after --, or a recipe file")
    validate = commands.add_parser("validate", help=_validate.__doc__)
    validate.add_argument("recipes", nargs="+", help="recipe YAML files")
    check = commands.add_parser("check", help=_check.__doc__)
    check.add_argument("paths", nargs="+", help="DAG folders, DAG files and recipe files")
    check.add_argument("--backend", choices=sorted(BACKENDS), default=None,
                       help="render every job for this backend (default: the one each task would use)")
    check.add_argument("--server-dry-run", metavar="KUBECONFIG_OR_CONN_ID", default=None,
                       help="send every Kubernetes manifest to this cluster with dryRun=All (nothing is created)")
    check.add_argument("--namespace", default=None, help="the dry run's namespace")
    check.add_argument("--format", choices=["text", "json", "junit"], default="text")
    check.add_argument("--output", default=None, help="write the report to this file (a text summary is printed)")
    args = parser.parse_args(argv)
    if args.command_name == "validate":
        return _validate(args)
    if args.command_name == "check":
        return _check(args)
    if len(args.command) == 1 and args.command[0].endswith((".yaml", ".yml")):
        return _render_recipe(args)
    args.command = args.command[1:] if args.command[:1] == ["--"] else args.command
    return _render(args)


if __name__ == "__main__":
    sys.exit(main())
