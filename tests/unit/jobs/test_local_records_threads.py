"""A local backend's records written by threads of one process at once (a triggerer follows many jobs, a search
submits trials side by side): each writer's temporary file is its own, so none removes another's."""

from __future__ import annotations

import threading

from airflow_ml_provider.jobs.backends.local.common import owner_token, read_json, write_json


def _at_once(count: int, work) -> list[BaseException]:
    barrier, errors = threading.Barrier(count), []

    def run(index: int) -> None:
        barrier.wait()
        try:
            work(index)
        except BaseException as exc:  # noqa: BLE001 - returned for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_threads_making_a_roots_owner_key_at_once_all_sign_with_the_one_key(tmp_path):
    for round_ in range(20):  # a fresh root each round: the key is made by whichever thread comes first
        root = tmp_path / f"root-{round_}"
        root.mkdir()
        tokens: list[str] = []
        assert _at_once(8, lambda _: tokens.append(owner_token(root, "job", "attempt"))) == []
        assert len(tokens) == 8 and len(set(tokens)) == 1
        assert [path.name for path in root.iterdir()] == ["owner.key"]  # no temporary file left


def test_threads_writing_one_record_at_once_leave_one_whole_record(tmp_path):
    path = tmp_path / "status.json"
    for _ in range(20):
        assert _at_once(8, lambda index: write_json(path, {"writer": index, "pad": "x" * 4096})) == []
        assert read_json(path)["pad"] == "x" * 4096
        assert [entry.name for entry in tmp_path.iterdir()] == ["status.json"]
