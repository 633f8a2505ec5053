"""A sharded job: N shards over M workers, each shard committed once, retried alone, skipped once done.

What a spec asks (``ShardPlan``), the queue the job's launcher hands shards out of (``ShardQueue``: no I/O, no
clock) and its progress line. A shard is done when its output is committed under ``ShardPlan.output``
(``shard-<index>``: see ``runtime.shards``), so a resubmitted job (a preemption, a retry) skips the shards
that are done and re-runs only those that were in flight. The launcher (``backends.local.sharded``) is the
queue: a worker is told its next shard by the launcher alone, over a channel of its own, so no worker can
take, report or see another job's shards.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

MAX_SHARDS = 1_000_000  # one job's; also bounds what the launcher keeps per shard
MAX_SHARD_INPUTS = 1024  # files one shard reads
FAILED_LISTED = 50  # failed shards named in a result (its values are bounded to 1 KiB)

# The worker's contract (runtime.shards reads them): the shard it runs, how many there are, what it reads (a JSON
# list) and the directory it writes, committed when it ends well; and, for a worker the launcher hands shards to
# over its stdin, that it does (a process that runs one shard and ends, as a pod of an Indexed Job does, has not).
INDEX_ENV, COUNT_ENV, INPUTS_ENV, OUTPUT_ENV = ("AIRFLOW_ML_SHARD_INDEX", "AIRFLOW_ML_SHARD_COUNT",
                                                "AIRFLOW_ML_SHARD_INPUTS", "AIRFLOW_ML_SHARD_OUTPUT")
ATTEMPT_ENV, ROOT_ENV, STREAM_ENV = "AIRFLOW_ML_SHARD_ATTEMPT", "AIRFLOW_ML_SHARDS_OUTPUT", "AIRFLOW_ML_SHARD_STREAM"


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("contains a NUL character")
    return value


Location = Annotated[str, AfterValidator(_no_nul), Field(pattern=r"^(/|[a-z][a-z0-9+.-]*://)", max_length=4096)]


class ShardPlan(BaseModel):
    """What a sharded job maps its workers over.

    Args:
        count: shards (a job's ``num_workers`` is how many run at once).
        inputs: each shard's files (paths or URLs), if the shards are files; ``count`` then is their number.
        output: where each shard's output is committed, as ``<output>/shard-<index>``: a directory the job
            writes (on the local backend its model directory or one of its ``output_dirs``), or a URL.
        max_attempts: tries of one shard before it counts as failed.
        max_failed_shards: failed shards the job may have and still succeed (listed in its result).
        in_process: the command runs many shards itself (``runtime.shards.serve``), taking them one after
            another; otherwise it runs once per shard, in a process of its own.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    count: Annotated[int, Field(ge=1, le=MAX_SHARDS)]
    inputs: list[Annotated[list[Location], Field(max_length=MAX_SHARD_INPUTS)]] = Field(default_factory=list,
                                                                                     max_length=MAX_SHARDS)
    output: Location
    max_attempts: Annotated[int, Field(ge=1, le=100)] = 3
    max_failed_shards: Annotated[int, Field(ge=0)] = 0
    in_process: bool = False

    @model_validator(mode="after")
    def _one_input_list_per_shard(self) -> ShardPlan:
        if self.inputs and len(self.inputs) != self.count:
            raise ValueError(f"inputs: {len(self.inputs)} lists for {self.count} shards (count); one per shard")
        return self


def shard_name(index: int) -> str:
    """A shard's committed name under the plan's output (sorted as numbered)."""
    return f"shard-{index:06d}"


@dataclass
class ShardQueue:
    """Which shard each worker runs next; how the shards ended. Shards wait in order, a retried one at the end.

    A worker's reports count only for the shard it was handed (any other is ignored and said so), so a worker
    can settle no shard but its own.
    """

    count: int
    max_attempts: int = 3
    max_failed_shards: int = 0
    pending: deque = field(init=False)
    attempts: dict[int, int] = field(default_factory=dict)  # started tries, per shard that had one
    running: dict[int, int] = field(default_factory=dict)  # worker -> shard
    ran: int = 0  # shards this attempt of the job ran to their commit
    skipped: int = 0  # shards it found committed already
    retried: int = 0
    rows: int = 0
    failed: list[int] = field(default_factory=list)
    last_failure: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.pending = deque(range(self.count))

    def take(self, worker: int) -> tuple[int, int] | None:
        """The next shard for ``worker`` and its try (1, 2...), or None when none waits."""
        if worker in self.running:
            raise ValueError(f"worker {worker} still runs shard {self.running[worker]}")
        if not self.pending:
            return None
        index = self.pending.popleft()
        self.attempts[index] = self.attempts.get(index, 0) + 1
        self.running[worker] = index
        return index, self.attempts[index]

    def report(self, worker: int, index: object, state: object, rows: object = 0, error: str = "") -> str | None:
        """``worker`` says how its shard ended (``done``, ``skipped``, ``failed``); returns why it is ignored, or
        None when taken."""
        if self.running.get(worker) != index or isinstance(index, bool):
            return f"worker {worker} reported shard {index!r}, which it was not running"
        if state not in ("done", "skipped", "failed"):
            return f"worker {worker} reported shard {index} as {state!r} (done, skipped or failed)"
        del self.running[worker]
        if state == "failed":
            self._failed(index, error or "failed")
            return None
        if state == "skipped":
            self.skipped += 1
        else:
            self.ran += 1
            self.rows += rows if isinstance(rows, int) and not isinstance(rows, bool) and 0 <= rows < 2**63 else 0
        return None

    def lost(self, worker: int, why: str, counts: bool) -> int | None:
        """``worker`` ended while running a shard: it waits again, ``counts`` saying whether that try counts
        (a crash does; a worker killed from outside, a preemption, does not). Returns the shard, if any."""
        index = self.running.pop(worker, None)
        if index is None:
            return None
        if counts:
            self._failed(index, why)
        else:
            self.attempts[index] -= 1
            self.pending.appendleft(index)
        return index

    def _failed(self, index: int, why: str) -> None:
        self.last_failure[index] = why
        if self.attempts[index] >= self.max_attempts:
            self.failed.append(index)
        else:
            self.retried += 1
            self.pending.append(index)

    @property
    def settled(self) -> int:
        return self.ran + self.skipped + len(self.failed)

    @property
    def finished(self) -> bool:
        return not self.pending and not self.running

    @property
    def too_many_failed(self) -> bool:
        return len(self.failed) > self.max_failed_shards

    def result(self) -> dict:
        """The job's ``result``: what XCom gets (every value small: ``FAILED_LISTED`` failed shards at most)."""
        return {"shards": self.count, "shards_done": self.ran + self.skipped, "shards_ran": self.ran,
                "shards_skipped": self.skipped, "shards_retried": self.retried, "shards_failed": len(self.failed),
                "failed_shards": sorted(self.failed)[:FAILED_LISTED], "rows": self.rows}


def settled(count: int, max_attempts: int = 3, max_failed_shards: int = 0, *, job: str | None,
            committed: dict[int, dict], failed: set[int]) -> ShardQueue:
    """The queue of a job whose shards its own pods settled (an Indexed Job's: ``backends.kubernetes.sharded``), so
    that its ``result()`` says what a local job's says: ``committed`` maps each committed shard to its marker (ran
    by this job when the marker names ``job``, its Job's uid; skipped otherwise: committed before it), ``failed``
    the shards out of tries (a committed one is done, whatever failed before)."""
    queue = ShardQueue(count, max_attempts, max_failed_shards)
    queue.pending.clear()
    for index, marker in committed.items():
        if not 0 <= index < count:
            continue
        if job is not None and marker.get("job") == job:
            queue.ran += 1
            rows, attempt = marker.get("rows"), marker.get("attempt")
            queue.rows += rows if type(rows) is int and 0 <= rows < 2**63 else 0
            queue.retried += attempt - 1 if type(attempt) is int and 1 <= attempt <= max_attempts else 0
        else:
            queue.skipped += 1
    queue.failed = sorted(index for index in failed if 0 <= index < count and index not in committed)
    queue.retried += len(queue.failed) * (max_attempts - 1)
    return queue


def progress(queue: ShardQueue, elapsed_s: float) -> str:
    """``shards 4,210/10,000  rows 8.1M  2,310 rows/s  ETA 41 min``: the settled shards, the rows this attempt
    scored, its rate and, from the rate of the shards it ran, the time the rest will take."""
    line = f"shards {queue.settled:,}/{queue.count:,}  rows {_short(queue.rows)}"
    if elapsed_s > 0:
        line += f"  {queue.rows / elapsed_s:,.0f} rows/s"
    worked = queue.settled - queue.skipped
    left = queue.count - queue.settled
    if worked and left and elapsed_s > 0:
        line += f"  ETA {_duration(left * elapsed_s / worked)}"
    failed = f"  failed {len(queue.failed):,}" if queue.failed else ""
    return line + failed


def settled_line(settled: int, count: int, worked: int, elapsed_s: float) -> str:
    """``shards 4,210/10,000  ETA 41 min`` for a job whose backend counts its settled shards (an Indexed Job's
    status), the ETA from the ``worked`` shards settled in ``elapsed_s``."""
    line = f"shards {settled:,}/{count:,}"
    if worked > 0 and settled < count and elapsed_s > 0:
        line += f"  ETA {_duration((count - settled) * elapsed_s / worked)}"
    return line


def _short(value: int) -> str:
    for size, unit in ((10**9, "G"), (10**6, "M"), (10**3, "k")):
        if value >= size:
            return f"{value / size:.1f}{unit}"
    return str(value)


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 6000:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
