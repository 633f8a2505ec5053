"""How every backend starts a PyTorch job: one ``torchrun`` agent per worker; on a cluster static rendezvous
(``static_args``), on the local backend c10d rendezvous for an elastic job (``torchrun_args``) and one agent for
a fixed-size one (``one_machine_args``).

A worker (a local process group, a pod) runs ``torchrun`` with ``--nproc-per-node`` ranks; the agents
meet at one rendezvous endpoint (the local launcher's loopback port, node 0's store in a cluster) and
torchrun gives each rank ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``.
An elastic job (``min_workers``/``max_workers``) becomes ``--nnodes=MIN:MAX`` with ``MAX_RESTARTS``
restarts of the group: a lost rank re-forms the group, whose trainer resumes from its newest checkpoint.
A non-elastic job has no restart: its end is the job's (a preemption resubmits it from its checkpoint).

On the local backend each rank's lines come out of torchrun prefixed ``[<global rank>]:`` (``--tee 3``
with the prefix template); lines without that prefix are the agent's own, among them its failure
summary, whose ``rank``/``exitcode`` fields say how each failed rank ended. A rank cannot write an
unprefixed line. In a pod (``prefixed=False``) the ranks write to the container's log as they are, so
the pod log reader parses their structured lines like any other framework's.

On every Kubernetes backend a controller numbers the pods (the Job controller's ``JOB_COMPLETION_INDEX``,
Volcano's pytorch plugin, Kubeflow Trainer's ``PET_*`` variables), and the agents meet by torchrun's static
rendezvous (``static_args``): node ``i`` is the controller's pod ``i`` and node 0 hosts the store at the master
address, whatever any name resolves to when the agents start (c10d picks its store's host by a lookup of the
endpoint's name at start: indexed_job.py says why that cannot be relied on in a pod).
"""

from __future__ import annotations

import re

MAX_RESTARTS = 3  # an elastic job's group re-forms at most this often before the job fails
RENDEZVOUS_PORT = 29400  # torchrun's default c10d port, on pod 0 of a Kubernetes job
# Every rank line starts with its global rank (torchrun's own default is the role and local rank).
LINE_PREFIX_ENV = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[${rank}]:"}
# Each rendezvous round gets a store of its own, hosted by its rank 0 on a fresh port. By default the agents
# share one store across rounds and the ranks' keys ("default_pg/...") are never cleared, so a re-formed
# group's rank can read the killed group's Gloo address and fail ("Connection refused") or hang until the
# job's deadline (torch/distributed/elastic/rendezvous/dynamic_rendezvous.py, seen on the local backend).
FRESH_STORE_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
_RANK_LINE = re.compile(r"^\[(?P<rank>\d+)\]:(?P<text>.*)$")
_SUMMARY_RANK = re.compile(r"^\s+rank\s+: (?P<rank>\d+) \(local_rank: \d+\)\s*$")
_SUMMARY_EXIT = re.compile(r"^\s+exitcode\s+: (?P<code>-?\d+) ")
_ROOT_CAUSE = "Root Cause (first observed failure):"


def nnodes(spec) -> str:
    """``--nnodes``: the worker count, or ``MIN:MAX`` for an elastic job."""
    if not spec.elastic:
        return str(spec.num_workers)
    return f"{spec.min_workers or spec.num_workers}:{spec.max_workers or spec.num_workers}"


def torchrun_args(spec, rdzv_id: str) -> list[str]:
    """torchrun's options for ``spec`` on the local backend (without the program): c10d rendezvous at the
    endpoint the launcher sets as ``PET_RDZV_ENDPOINT`` once it has a port (each agent's address its
    ``PET_LOCAL_ADDR``), the rank lines prefixed by global rank, the command run as it is (``--no-python``)."""
    args = ["--nnodes", nnodes(spec), "--nproc-per-node", str(spec.nproc_per_node), "--rdzv-backend", "c10d",
            "--rdzv-id", rdzv_id]
    return [*args, *_run(spec, prefixed=True)]


def one_machine_args(spec) -> list[str]:
    """torchrun's options for a fixed-size job whose workers share one machine (the local backend): one agent,
    every worker's ranks its own (``--standalone``: its store on a free loopback port), as torchrun runs a
    node. Rank lines prefixed by global rank, as ``torchrun_args`` has them."""
    if spec.elastic:
        raise ValueError("min_workers/max_workers: an elastic job needs an agent per worker (torchrun_args)")
    return ["--standalone", "--nnodes", "1", "--nproc-per-node", str(spec.num_workers * spec.nproc_per_node),
            *_run(spec, prefixed=True)]


def static_args(spec, rendezvous: dict[str, str]) -> list[str]:
    """torchrun's options for a fixed-size job in pods a controller numbers: static rendezvous with the
    ``rendezvous`` options (``nnodes``, ``node-rank``, ``master-addr``, ``master-port``) the controller's
    values fill in (Volcano's, through the kubelet's ``$(VAR)`` expansion); an option left out torchrun
    reads from the ``PET_*`` variable the controller sets (Kubeflow Trainer). The ranks' lines unprefixed."""
    if spec.elastic:
        raise ValueError("min_workers/max_workers: the controller runs a fixed number of nodes (static "
                         "rendezvous); elastic bounds need the local backend")
    options = [part for option, value in rendezvous.items() for part in (f"--{option}", value)]
    return [*options, "--nproc-per-node", str(spec.nproc_per_node), "--rdzv-backend", "static",
            *_run(spec, prefixed=False)]


def _run(spec, prefixed: bool) -> list[str]:
    """The options every agent shares, then the command run as it is."""
    if spec.command[0].startswith("-"):
        raise ValueError(f"command: the program {spec.command[0]!r} starts with '-', which torchrun would "
                         "take for one of its own options")
    tee = ["--tee", "3"] if prefixed else []
    return ["--max-restarts", str(MAX_RESTARTS if spec.elastic else 0), *tee, "--no-python", *spec.command]


def output(line: str) -> tuple[int | None, str]:
    """``(global rank, text)`` of a rank's line, ``(None, line)`` for the agent's own."""
    if match := _RANK_LINE.match(line):
        return int(match["rank"]), match["text"]
    return None, line


class FailureSummary:
    """Reads an agent's own lines for its failure summary: ``failures`` is ``[(rank, exit code)]``, the root
    cause first (torchrun lists the ranks it stopped itself, SIGTERM'd after the first failure, above it)."""

    def __init__(self) -> None:
        self.failures: list[tuple[int, int]] = []
        self._rank: int | None = None
        self._root = False

    def feed(self, agent_line: str) -> None:
        if _ROOT_CAUSE in agent_line:
            self._root = True
        elif match := _SUMMARY_RANK.match(agent_line):
            self._rank = int(match["rank"])
        elif self._rank is not None and (match := _SUMMARY_EXIT.match(agent_line)):
            self.failures.insert(0 if self._root else len(self.failures), (self._rank, int(match["code"])))
            self._rank, self._root = None, False
