"""Elastic Horovod on the local backend: worker slots live in etcd, and this is the discovery script.

``python -m airflow_ml_provider.runtime.local_discovery --etcd URL --job NAME`` prints one
``host:1`` line per slot key ``/airflow-ml/jobs/<job>/slots/<n>``; ``horovodrun`` runs it every
second, so writing or deleting a key adds or removes a worker while the job runs.

Each slot gets its own loopback host name. Horovod blacklists the *host* of a failed worker, so if
every slot were ``localhost`` one killed worker would blacklist them all. Names that differ only in
leading zeros of the last octet (``127.0.0.1``, ``127.0.0.01``, ``127.0.0.001``, ...) all resolve to
127.0.0.1 (``inet_aton`` reads them as the same number), so Horovod still runs them locally (it
compares the resolved address with this machine's) but tracks and blacklists each one alone.
"""

from __future__ import annotations

import argparse
import sys

from airflow_ml_provider.runtime.etcd_kv import EtcdKV

ETCD_ENV = "AIRFLOW_ML_ETCD"  # where the local backend finds etcd when not configured explicitly
_ROOT = "/airflow-ml/jobs"


def slots_prefix(job: str) -> str:
    return f"{_ROOT}/{job}/slots/"


def slot_host(slot: int) -> str:
    """The loopback host name of slot ``slot``: distinct per slot, always resolving to 127.0.0.1."""
    return "127.0.0." + "0" * slot + "1"


def write_slots(kv: EtcdKV, job: str, count: int) -> None:
    """Replace the job's slots with ``count`` slots numbered from 0."""
    kv.delete_prefix(slots_prefix(job))
    for slot in range(count):
        kv.put(f"{slots_prefix(job)}{slot}", "1")


def discover(kv: EtcdKV, job: str) -> list[str]:
    """``host:slots`` lines of the job's current slots, in slot order; malformed keys are reported and skipped."""
    lines = []
    for key, value in kv.get_prefix(slots_prefix(job)).items():
        slot = key.removeprefix(slots_prefix(job))
        if not (slot.isdigit() and value.isdigit() and int(value) > 0):
            print(f"local_discovery: ignoring {key}={value!r} (want an integer slot and slot count)", file=sys.stderr)
            continue
        lines.append((int(slot), f"{slot_host(int(slot))}:{value}"))
    return [line for _, line in sorted(lines)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_ml_provider.runtime.local_discovery")
    parser.add_argument("--etcd", required=True, help="etcd endpoint, e.g. http://127.0.0.1:2379")
    parser.add_argument("--job", required=True, help="the local job's name")
    args = parser.parse_args(argv)
    for line in discover(EtcdKV(args.etcd), args.job):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
