"""A pod's gate into a job of several roles: completes its ``TF_CONFIG`` with its task index, then becomes the
command (``exec``).

On Kubernetes a pod's index in its role is known only when it runs: the controller gives it (Volcano's env
plugin ``VC_TASK_INDEX``), and the kubelet expands ``$(VC_TASK_INDEX)`` in the container's argv but not in an
environment value defined before the plugin's variable. The backend therefore renders ``TF_CONFIG`` with the
cluster and the pod's task type, and this gate's ``--task-index $(VC_TASK_INDEX)`` fills in the index, so a
user's own script reads a whole ``TF_CONFIG`` as it would from TFJob. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

ROLE_INDEX_ENV = "AIRFLOW_ML_ROLE_INDEX"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_ml_provider.runtime.tf_config")
    parser.add_argument("--task-index", required=True, help="this pod's index in its role")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to become")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not args.task_index.isdigit() or not command:
        parser.error("needs --task-index N (a number: the kubelet expands $(VC_TASK_INDEX)) and -- COMMAND")
    try:
        config = json.loads(os.environ["TF_CONFIG"])
        config["task"]["index"] = int(args.task_index)
    except (KeyError, ValueError, TypeError):
        parser.error("TF_CONFIG with the job's cluster and this pod's task type is not set")
    os.environ["TF_CONFIG"] = json.dumps(config, sort_keys=True)
    os.environ[ROLE_INDEX_ENV] = args.task_index
    os.execvp(command[0], command)
    return 0  # (not reached)


if __name__ == "__main__":
    sys.exit(main())
