"""The lists that place test files on `make test`'s workers (tests/scheduling.py, tests/support.py) name files
and folders that exist: a renamed file would otherwise drop out of its place silently (started last, or on a
CPU worker, or with a deployment of its own)."""

from __future__ import annotations

import pytest
import scheduling

import support

PLACES = {
    "SLOW_FIRST": scheduling.SLOW_FIRST,
    "MOSTLY_WAITING": scheduling.MOSTLY_WAITING,
    "ONE_UNIT_FOLDERS": scheduling.ONE_UNIT_FOLDERS,
    "SHARED_DEPLOYMENTS": tuple(support.SHARED_DEPLOYMENTS),
}


@pytest.mark.parametrize("name", PLACES)
def test_every_listed_test_file_or_folder_exists(name):
    missing = [path for path in PLACES[name] if not (support.REPO / path).exists()]
    assert not missing, f"{name} names what is not in the repository: {missing}"


def test_a_mostly_waiting_file_is_its_own_work_unit():
    """The waiting worker takes whole work units: a file that shares one (a deployment group, a folder that
    shares a cluster) would take the others with it."""
    shared = [path for path in scheduling.MOSTLY_WAITING if scheduling.work_unit(path) != path]
    assert not shared, shared
