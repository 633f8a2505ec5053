"""A sharded job's worker side: run shards as the launcher hands them out, commit each one's output once.

Two ways to be a worker of a sharded job (``jobs.shards``):

- any program, run once per shard: ``python -I -S shards.py -- PROGRAM ARGS...`` (the launcher wraps the job's
  command so) runs it with ``AIRFLOW_ML_SHARD_INDEX``, ``AIRFLOW_ML_SHARD_COUNT``, ``AIRFLOW_ML_SHARD_INPUTS``
  (a JSON list of the shard's files) and ``AIRFLOW_ML_SHARD_OUTPUT`` (an empty directory to write into) in its
  environment, and commits that directory when the program exits 0; it may say how many rows it processed by
  writing the number to ``_ROWS`` in that directory (read as data: anything but a whole number is ignored with
  a warning naming the shard, and the file is not committed);
- a Python function over many cheap shards in one process: ``serve(fn)``, ``fn(shard)`` writing into
  ``shard.output`` and returning the rows it processed.

Committing: a shard's output is written in ``<output>/.tmp/shard-<index>-...`` and renamed to
``<output>/shard-<index>`` with a ``_COMMITTED`` marker inside (on object storage: uploaded, then the marker
object last). A shard whose marker exists is done: a shard that runs again (its worker died after the commit,
a resubmitted job) is skipped, so every shard's output is committed exactly once.

Talking to the launcher: shards arrive as JSON lines on stdin (``{"index", "attempt", "inputs"}``, then EOF:
no more), and each one's end goes back on the same channel (``{"index", "state", "rows", "error"}``): stdin is
a socket of this worker's own, not its output, so no line a program prints is taken for a report. Standard
library only (the wrapper runs isolated, whatever the job's environment); object storage needs fsspec.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import stat
import subprocess
import sys
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

# (the contract's names: jobs.shards holds them too; this file runs where the package may not import)
INDEX_ENV, COUNT_ENV, INPUTS_ENV, OUTPUT_ENV = ("AIRFLOW_ML_SHARD_INDEX", "AIRFLOW_ML_SHARD_COUNT",
                                                "AIRFLOW_ML_SHARD_INPUTS", "AIRFLOW_ML_SHARD_OUTPUT")
ATTEMPT_ENV, ROOT_ENV, STREAM_ENV = "AIRFLOW_ML_SHARD_ATTEMPT", "AIRFLOW_ML_SHARDS_OUTPUT", "AIRFLOW_ML_SHARD_STREAM"
JOB_ENV = "AIRFLOW_ML_JOB_UID"  # the job attempt's (a local launcher's), recorded in the marker
MARKER = "_COMMITTED"
ROWS_FILE = "_ROWS"  # a per-shard program's count of the rows it processed, in its output directory
_ROWS_BYTES = 32
TMP = ".tmp"  # under the output: tries in progress, as shard-<index>-<random>
FAILED = ".failed"  # under the output: shards out of tries, as shard-<index>.json (runtime.shard_pod)
_RECORD_BYTES = 65536
_ERROR_CHARS = 2000


def shard_name(index: int) -> str:
    return f"shard-{index:06d}"


@dataclass
class Shard:
    """One shard as its worker sees it: ``output`` is the (uncommitted) directory to write its files into."""

    index: int
    count: int
    inputs: list[str]
    output: str
    attempt: int = 1
    info: dict = field(default_factory=dict)  # what the function reports beside its rows (kept in the marker)


def committed(root: str, index: int) -> bool:
    """Whether shard ``index``'s output is committed under ``root``."""
    final = _join(root, shard_name(index))
    if "://" in root:
        return _fs(root).exists(_join(final, MARKER))
    return os.path.isdir(final) and not os.path.islink(final) and os.path.isfile(os.path.join(final, MARKER))


def failed_record(root: str, index: int) -> dict | None:
    """Shard ``index``'s failure record (``<root>/.failed/shard-<index>.json``: its tries, last error and job),
    written by a pod of an Indexed Job whose shard ran out of tries (``runtime.shard_pod``), or None."""
    return _read_json(_fs(root) if "://" in root else None, _join(root, FAILED, f"{shard_name(index)}.json"))


def record_failure(root: str, index: int, record: dict) -> None:
    """Write shard ``index``'s failure record (replaced whole: a temporary file renamed, or one object)."""
    data = json.dumps({"index": index, **record})[:_RECORD_BYTES]
    name = f"{shard_name(index)}.json"
    if "://" in root:
        with _fs(root).open(_join(root, FAILED, name), "w") as f:
            f.write(data)
        return
    folder = os.path.join(root, FAILED)
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{name}-{uuid.uuid4().hex[:8]}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(data)
    os.chmod(tmp, 0o644)
    os.rename(tmp, os.path.join(folder, name))


def records(root: str) -> tuple[dict[int, dict], dict[int, dict]]:
    """What is settled under ``root``: each committed shard's marker and each failure record, by shard index (one
    listing of each folder; a marker that cannot be read counts as committed, with nothing known of it)."""
    fs = _fs(root) if "://" in root else None
    committed_ones: dict[int, dict] = {}
    failed: dict[int, dict] = {}
    for name in _names(fs, root):
        index = _index_of(name, "")
        if index is not None and committed(root, index):
            committed_ones[index] = _read_json(fs, _join(root, name, MARKER)) or {}
    for name in _names(fs, _join(root, FAILED)):
        index = _index_of(name, ".json")
        if index is not None and (record := failed_record(root, index)) is not None:
            failed[index] = record
    return committed_ones, failed


def _names(fs, folder: str) -> list[str]:
    try:
        if fs is not None:
            return [path.rstrip("/").rsplit("/", 1)[-1] for path in fs.ls(folder, detail=False)]
        return os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _index_of(name: str, suffix: str) -> int | None:
    """The shard a name under the output is of (``shard-000042`` + ``suffix``), or None."""
    if not name.startswith("shard-") or not name.endswith(suffix):
        return None
    digits = name[len("shard-"):len(name) - len(suffix)]
    return int(digits) if digits.isascii() and digits.isdigit() and len(digits) <= 7 else None


def _read_json(fs, path: str) -> dict | None:
    try:
        if fs is not None:
            with fs.open(path, "r") as f:
                value = json.loads(f.read(_RECORD_BYTES))
        else:
            with open(path, encoding="utf-8") as f:
                value = json.loads(f.read(_RECORD_BYTES))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def serve(fn: Callable[[Shard], int | None], root: str | None = None) -> int:
    """Run ``fn`` over the shards the launcher hands this worker, one after another; returns the exit code. Outside
    a launcher's stream (a pod of an Indexed Job, a run by hand) it runs the one shard its environment names."""
    root = root or os.environ[ROOT_ENV]
    count = int(os.environ.get(COUNT_ENV, "1"))

    def run(shard: Shard) -> int:
        rows = fn(shard)
        return int(rows or 0)

    if os.environ.get(STREAM_ENV) != "1":
        return _one(root, count, run)
    for task in _assignments():
        _report(_attempt(root, count, task, run))
    return 0


def run_program(argv: list[str], root: str | None = None) -> int:
    """Run ``argv`` once per shard (the launcher's wrapper for a job's command): its exit code says how the shard
    went, and its output is the job's log."""
    root = root or os.environ[ROOT_ENV]
    count = int(os.environ.get(COUNT_ENV, "1"))
    run = program(argv, count)
    for task in _assignments():
        _report(_attempt(root, count, task, run))
    return 0


def program(argv: list[str], count: int) -> Callable[[Shard], int]:
    """What runs one try of a shard as ``argv``, in a process of its own with the worker's contract in its
    environment (the launcher's workers, and a pod of an Indexed Job: ``runtime.shard_pod``)."""

    def run(shard: Shard) -> int:
        env = os.environ | {INDEX_ENV: str(shard.index), COUNT_ENV: str(count), ATTEMPT_ENV: str(shard.attempt),
                            INPUTS_ENV: json.dumps(shard.inputs), OUTPUT_ENV: shard.output}
        for name in (STREAM_ENV, ROOT_ENV):  # it writes its own directory alone, and is not a worker of the stream
            env.pop(name, None)
        code = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL).returncode
        if code != 0:
            raise RuntimeError(f"{argv[0]} exited with code {code}")
        return _rows_told(shard)

    return run


def _rows_told(shard: Shard) -> int:
    """The rows a per-shard program wrote to ``_ROWS`` (0 without one), which is then removed: a link is not
    followed, and anything but a whole number in a plain file is ignored, said on stderr (the job's log) naming
    the shard."""
    path = os.path.join(shard.output, ROWS_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return 0
    except OSError as exc:  # a link, or not readable
        text, why = b"", f"cannot be read ({exc.strerror})"
    else:
        try:
            regular = stat.S_ISREG(os.fstat(fd).st_mode)
            text, why = (os.read(fd, _ROWS_BYTES + 1), None) if regular else (b"", "is not a file")
        finally:
            os.close(fd)
    _discard(path) if os.path.isdir(path) and not os.path.islink(path) else _unlink(path)
    told = text.decode("ascii", "replace").strip()
    if why is None and len(text) <= _ROWS_BYTES and told.isascii() and told.isdigit():
        return int(told)
    why = why or f"is not a whole number ({told[:_ROWS_BYTES]!r})"
    print(f"shard {shard.index}: {ROWS_FILE} {why}; its rows are not counted", file=sys.stderr, flush=True)
    return 0


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _one(root: str, count: int, run: Callable[[Shard], int]) -> int:
    index = int(os.environ.get(INDEX_ENV) or os.environ.get("JOB_COMPLETION_INDEX") or 0)
    inputs = json.loads(os.environ.get(INPUTS_ENV) or "[]")
    report = _attempt(root, count, {"index": index, "attempt": int(os.environ.get(ATTEMPT_ENV, "1")),
                                    "inputs": inputs}, run)
    return 1 if report["state"] == "failed" else 0


def _attempt(root: str, count: int, task: dict, run: Callable[[Shard], int]) -> dict:
    """One try of a shard: skipped when committed, else run into a fresh directory and committed."""
    index = task["index"]
    if committed(root, index):
        return {"index": index, "state": "skipped"}
    started = time.monotonic()
    shard = Shard(index, count, list(task.get("inputs") or []), _fresh(root, index), task.get("attempt", 1))
    try:
        rows = run(shard)
        if not _commit(root, shard, rows):
            return {"index": index, "state": "skipped"}  # another try committed it first
    except Exception as exc:  # noqa: BLE001 - a shard's failure is reported, the worker goes on
        sys.stdout.flush()
        traceback.print_exc()
        sys.stderr.flush()
        _discard(shard.output)
        return {"index": index, "state": "failed", "error": f"{type(exc).__name__}: {exc}"[:_ERROR_CHARS]}
    return {"index": index, "state": "done", "rows": rows, "seconds": round(time.monotonic() - started, 6)}


def _fresh(root: str, index: int) -> str:
    """An empty directory for a try's output; what earlier tries of the shard left is removed."""
    if "://" in root:
        import tempfile

        return tempfile.mkdtemp(prefix=f"{shard_name(index)}-")
    tmp = os.path.join(root, TMP)  # (a folder of its own: listing it costs nothing like listing the shards)
    for stale in glob.glob(os.path.join(glob.escape(tmp), f"{shard_name(index)}-*")):
        _discard(stale)
    path = os.path.join(tmp, f"{shard_name(index)}-{uuid.uuid4().hex[:8]}")
    os.makedirs(path)
    return path


def _commit(root: str, shard: Shard, rows: int) -> bool:
    """Publish the try's directory as the shard's output; False when another try already had."""
    marker = json.dumps({"index": shard.index, "attempt": shard.attempt, "rows": rows, "inputs": shard.inputs,
                         "job": os.environ.get(JOB_ENV), **shard.info})  # which attempt of the job committed it
    final = _join(root, shard_name(shard.index))
    with open(os.path.join(shard.output, MARKER), "w") as f:
        f.write(marker)
    if "://" in root:
        fs = _fs(root)
        for name in sorted(os.listdir(shard.output), key=lambda n: n == MARKER):  # the marker last
            fs.put_file(os.path.join(shard.output, name), _join(final, name))
        _discard(shard.output)
        return True
    for path in _tree(shard.output):
        os.chmod(path, 0o755 if os.path.isdir(path) else 0o644)  # read by later jobs, as users of their own
    try:
        os.rename(shard.output, final)
    except OSError:  # ENOTEMPTY/EEXIST: committed by another try meanwhile
        _discard(shard.output)
        if committed(root, shard.index):
            return False
        raise
    return True


def _tree(top: str) -> Iterator[str]:
    yield top
    for base, dirs, files in os.walk(top):
        for name in dirs + files:
            yield os.path.join(base, name)


def _discard(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _assignments() -> Iterator[dict]:
    with os.fdopen(0, "rb", buffering=0, closefd=False) as channel:
        buffered = b""
        while chunk := channel.read(65536):
            buffered += chunk
            *whole, buffered = buffered.split(b"\n")
            for line in whole:
                if line.strip():
                    yield json.loads(line)


def _report(message: dict) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    data = (json.dumps(message) + "\n").encode()
    while data:
        data = data[os.write(0, data):]


def _join(root: str, *parts: str) -> str:
    return "/".join([root.rstrip("/"), *parts])


def _fs(root: str):
    from fsspec.core import url_to_fs

    return url_to_fs(root)[0]


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        sys.exit("usage: shards.py -- PROGRAM [ARGS...]")
    sys.exit(run_program(args))
