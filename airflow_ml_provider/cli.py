"""`airflow-ml`: the provider's command line, usable without Airflow running or a cluster."""

from __future__ import annotations

import argparse
import sys

from airflow_ml_provider.jobs.backends import BACKENDS, get_backend
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.spec import SpecError, TrainingJobSpec


def _render(args: argparse.Namespace) -> int:
    """Print what a backend would run or create for a job, without running it."""
    try:
        spec = TrainingJobSpec(framework=args.framework, command=args.command, num_workers=args.workers,
                               image=args.image)
    except SpecError as exc:
        print(f"airflow-ml render: {exc}", file=sys.stderr)
        return 2
    identity = JobIdentity(args.dag_id, args.task_id, args.run_id)
    # rendering needs no cluster: Kubernetes backends only build manifests here
    config = {"root": args.local_root} if args.backend == "local" else {"api_client": None, "namespace": args.namespace}
    print(get_backend(args.backend, **config).render(identity.name, spec, identity.labels()))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="airflow-ml", description=__doc__)
    commands = parser.add_subparsers(dest="command_name", required=True)
    render = commands.add_parser("render", help=_render.__doc__)
    render.add_argument("--backend", default="local", choices=sorted(BACKENDS))
    render.add_argument("--framework", default="horovod", choices=["horovod", "lightgbm", "generic"])
    render.add_argument("--workers", type=int, default=2)
    render.add_argument("--image", default=None)
    render.add_argument("--dag-id", default="dag")
    render.add_argument("--task-id", default="train")
    render.add_argument("--run-id", default="manual")
    render.add_argument("--local-root", default="./ml")
    render.add_argument("--namespace", default="default")
    render.add_argument("command", nargs=argparse.REMAINDER, help="the worker argv, after --")
    args = parser.parse_args(argv)
    args.command = args.command[1:] if args.command[:1] == ["--"] else args.command
    return _render(args)


if __name__ == "__main__":
    sys.exit(main())
