"""Checkpoints the bundled trainers write and resume from, on a local path or object storage.

A checkpoint is one file ``<prefix>-<step, zero-padded>.<ext>`` in the job's checkpoint directory
(``AIRFLOW_ML_CHECKPOINT_DIR``, under ``artifact_root``). A trainer resumes from
``AIRFLOW_ML_RESUME_FROM`` when the backend set it (the last checkpoint the preempted attempt
reported), else from the newest checkpoint in its directory, and says so twice: a structured line
``{"event": "resumed", ...}`` for the control side and a sentence for people reading the log.
Every checkpoint written is reported as ``{"event": "checkpoint", "path", "step", "epoch"}``, then
older ones beyond the newest ``keep`` are deleted (``--keep-checkpoints``, default 3, 0 keeps all): a
long job would otherwise keep every one it ever wrote, paid for by the gigabyte on object storage.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_ml_provider.artifact_layout import join
from airflow_ml_provider.runtime import storage
from airflow_ml_provider.runtime.metrics_log import emit

RESUME_ENV = "AIRFLOW_ML_RESUME_FROM"
KEEP = 3


@dataclass(frozen=True)
class Checkpoints:
    """The checkpoint files of one trainer: ``<prefix>-<number>.<ext>`` in ``directory``, of which
    :meth:`save` keeps the newest ``keep`` (0: all)."""

    directory: str | None
    prefix: str
    ext: str
    keep: int = KEEP

    def path(self, number: int) -> str:
        return join(self.directory, f"{self.prefix}-{number:06d}.{self.ext}")

    def number(self, location: str) -> int | None:
        match = re.fullmatch(rf"{re.escape(self.prefix)}-(\d+)\.{re.escape(self.ext)}", location.rsplit("/", 1)[-1])
        return int(match.group(1)) if match else None

    def latest(self) -> tuple[int, str] | None:
        """``(number, location)`` of the newest checkpoint in the directory, or None."""
        if not self.directory:
            return None
        found = [(n, p) for p in storage.list_files(self.directory) if (n := self.number(p)) is not None]
        return max(found) if found else None

    def resume_from(self) -> tuple[str, str] | None:
        """``(location, why)``: ``AIRFLOW_ML_RESUME_FROM`` if set and present, else the newest one here."""
        requested = os.environ.get(RESUME_ENV)
        if requested:
            if storage.exists(requested):
                return requested, f"{RESUME_ENV}"
            print(f"{RESUME_ENV}={requested} does not exist; looking for the latest checkpoint instead",
                  file=sys.stderr, flush=True)
        found = self.latest()
        return (found[1], f"latest checkpoint in {self.directory}") if found else None

    def save(self, number: int, write: Callable[[str], Any], **fields: Any) -> str:
        """Write checkpoint ``number`` atomically with ``write(local_path)``, report it, then
        :meth:`prune` the older ones."""
        location = storage.write_atomic(self.path(number), write, f".{self.ext}")
        emit("checkpoint", path=location, **fields)
        self.prune(number)
        return location

    def prune(self, newest: int) -> None:
        """Delete the files numbered up to ``newest`` (just written) but for the newest ``keep`` of them.
        A checkpoint resumed from therefore stays until a newer one exists, and one numbered above
        ``newest`` (an earlier attempt's, to be written again) is left to be overwritten."""
        if not self.keep:
            return
        written = sorted((n, p) for p in storage.list_files(self.directory)
                         if (n := self.number(p)) is not None and n <= newest)
        for _, location in written[:-self.keep]:
            storage.delete(location)


def add_keep_argument(parser: argparse.ArgumentParser) -> None:
    """Every trainer's ``--keep-checkpoints N`` (for :attr:`Checkpoints.keep`)."""
    parser.add_argument("--keep-checkpoints", type=_count, default=KEEP, metavar="N",
                        help=f"newest checkpoints kept, older ones deleted (default {KEEP}; 0 keeps all)")


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"not a count of checkpoints (0 or more): {text!r}")
    return int(text)


def announce_resume(location: str, why: str, rank: int = 0, **fields: Any) -> None:
    """The structured ``resumed`` line (every rank) and, from rank 0, a sentence saying from where and
    what is not trained again."""
    emit("resumed", path=location, source=why, rank=rank, **fields)
    if rank != 0:
        return
    done = ", ".join(f"{name} {value}" for name, value in fields.items())
    print(f"Resuming from checkpoint {location} ({why}): {done} already done, not repeated", flush=True)
