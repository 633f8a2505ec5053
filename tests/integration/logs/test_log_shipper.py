"""The Filebeat stand-in (tools/filebeat_shipper.py): a real local job's lines, shipped as ECS documents,
read back from Elasticsearch in the log file's order with the job's labels, exactly once even when shipped
twice."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest
from elasticsearch import Elasticsearch
from shipper_support import SHIPPER, ship

from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.logs.elasticsearch import ElasticsearchLogSource
from airflow_ml_provider.logs.files import FileLogSource
from support import wait_for

pytestmark = pytest.mark.integration

PRINT = ["python", "-c", "import json, os\nrank = os.environ['AIRFLOW_ML_RANK']\nfor i in range(150):\n"
         "    print(f'rank {rank} says {i}', flush=True)\n"
         "print(json.dumps({'event': 'metrics', 'step': 1, 'loss': 0.5}), flush=True)"]


def all_lines(source, **read_args) -> list:
    lines, cursor = [], None
    while batch := source.read(cursor, **read_args):
        if not batch.lines:
            return lines
        lines += batch.lines
        cursor = batch.cursor


def submit(backend: LocalBackend, task_id: str) -> str:
    identity = JobIdentity("ml_test_shipper", task_id, "manual__1")
    backend.submit(identity.name, TrainingJobSpec(framework="generic", command=PRINT, num_workers=2),
                   identity.labels())
    return identity.name


def shipped_lines(es: Elasticsearch, index: str, name: str) -> int:
    es.indices.refresh(index=index)
    query = {"term": {"kubernetes.labels.ml_airflow_apache_org/job-name": name}}
    return es.count(index=index, query=query)["count"]


def ship_job_cli(es_url: str, index: str, root, name: str) -> None:
    done = subprocess.run([sys.executable, str(SHIPPER), "--url", es_url,
                           "--index", index, "--root", str(root), "--job", name, "--poll-interval", "0.1"],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr


def test_shipped_log_reads_back_like_the_file(es, es_url, index, tmp_path):
    backend = LocalBackend(tmp_path / "ml")
    name = submit(backend, "train")
    ship_job_cli(es_url, index, backend.root, name)  # returns once the job has ended and all is shipped
    es.indices.refresh(index=index)

    from_file = all_lines(FileLogSource(backend.job_dir(name) / "output.log"))
    from_es = all_lines(ElasticsearchLogSource(es, index, name))
    assert len(from_file) == 2 * 151 + 1  # both ranks and the launcher's last word
    assert [line.text for line in from_es] == [line.text for line in from_file]
    assert [line.source for line in from_es] == [f"{name}-{line.source.replace(' ', '-')}"
                                                 for line in from_file]
    dag_label = {"term": {"kubernetes.labels.ml_airflow_apache_org/dag-id": "ml_test_shipper"}}
    assert es.count(index=index, query=dag_label)["count"] == len(from_file)

    ship_job_cli(es_url, index, backend.root, name)  # a restarted shipper sends everything again
    es.indices.refresh(index=index)
    assert es.count(index=index, query=dag_label)["count"] == len(from_file)


def test_shipping_a_whole_root_follows_every_job(es, es_url, index, tmp_path):
    backend = LocalBackend(tmp_path / "ml")
    names = [submit(backend, "first"), submit(backend, "second")]
    stop = threading.Event()
    shipper = threading.Thread(target=ship, args=(Elasticsearch(es_url), index, backend),
                               kwargs={"stop": stop, "poll_interval": 0.1})
    shipper.start()
    try:
        for name in names:
            wait_for(lambda name=name: shipped_lines(es, index, name) == 2 * 151 + 1, timeout=120,
                     what=f"all lines of {name} in Elasticsearch")
    finally:
        stop.set()
        shipper.join(30)
    assert not shipper.is_alive()
