"""How every backend starts a PyTorch job: one ``torchrun`` agent per worker, c10d rendezvous.

A worker (a local process group, a pod) runs ``torchrun`` with ``--nproc-per-node`` ranks; the agents
meet at one rendezvous endpoint (the local launcher's loopback port, pod 0's stable DNS name) and
torchrun gives each rank ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``.
An elastic job (``min_workers``/``max_workers``) becomes ``--nnodes=MIN:MAX`` with ``MAX_RESTARTS``
restarts of the group: a lost rank re-forms the group, whose trainer resumes from its newest checkpoint.
A non-elastic job has no restart: its end is the job's (a preemption resubmits it from its checkpoint).

Each rank's lines come out of torchrun prefixed ``[<global rank>]:`` (``--tee 3`` with the prefix
template); lines without that prefix are the agent's own, among them its failure summary, whose
``rank``/``exitcode`` fields say how each failed rank ended. A rank cannot write an unprefixed line.
"""

from __future__ import annotations

import re

MAX_RESTARTS = 3  # an elastic job's group re-forms at most this often before the job fails
RENDEZVOUS_PORT = 29400  # torchrun's default c10d port, on pod 0 of a Kubernetes job
# Every rank line starts with its global rank (torchrun's own default is the role and local rank).
LINE_PREFIX_ENV = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[${rank}]:"}
_RANK_LINE = re.compile(r"^\[(?P<rank>\d+)\]:(?P<text>.*)$")
_SUMMARY_RANK = re.compile(r"^\s+rank\s+: (?P<rank>\d+) \(local_rank: \d+\)\s*$")
_SUMMARY_EXIT = re.compile(r"^\s+exitcode\s+: (?P<code>-?\d+) ")


def nnodes(spec) -> str:
    """``--nnodes``: the worker count, or ``MIN:MAX`` for an elastic job."""
    if not spec.elastic:
        return str(spec.num_workers)
    return f"{spec.min_workers or spec.num_workers}:{spec.max_workers or spec.num_workers}"


def torchrun_args(spec, rdzv_id: str, endpoint: str | None = None, local_addr: str | None = None) -> list[str]:
    """torchrun's options for ``spec`` (without the program): c10d rendezvous at ``endpoint`` (None: taken
    from ``PET_RDZV_ENDPOINT`` in the agent's environment, set where the port is chosen), the rank lines
    prefixed by global rank, and the command run as it is (``--no-python``)."""
    if spec.command[0].startswith("-"):
        raise ValueError(f"command: the program {spec.command[0]!r} starts with '-', which torchrun would "
                         "take for one of its own options")
    args = ["--nnodes", nnodes(spec), "--nproc-per-node", str(spec.nproc_per_node), "--rdzv-backend", "c10d",
            "--rdzv-id", rdzv_id, "--max-restarts", str(MAX_RESTARTS if spec.elastic else 0), "--tee", "3"]
    if endpoint:
        args += ["--rdzv-endpoint", endpoint]
    if local_addr:
        args += ["--local-addr", local_addr]
    return [*args, "--no-python", *spec.command]


def output(line: str) -> tuple[int | None, str]:
    """``(global rank, text)`` of a rank's line, ``(None, line)`` for the agent's own."""
    if match := _RANK_LINE.match(line):
        return int(match["rank"]), match["text"]
    return None, line


class FailureSummary:
    """Reads an agent's own lines for its failure summary: ``failures`` is ``[(rank, exit code)]``."""

    def __init__(self) -> None:
        self.failures: list[tuple[int, int]] = []
        self._rank: int | None = None

    def feed(self, agent_line: str) -> None:
        if match := _SUMMARY_RANK.match(agent_line):
            self._rank = int(match["rank"])
        elif self._rank is not None and (match := _SUMMARY_EXIT.match(agent_line)):
            self.failures.append((self._rank, int(match["code"])))
            self._rank = None
