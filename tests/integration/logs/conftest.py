"""Elasticsearch for the log contract tests: the test double always, and a real Elasticsearch too
when ``ELASTICSEARCH_URL`` is set (e.g. ``http://elastic:changeme@localhost:9200``). Every test gets
its own index with the ECS mapping Filebeat's template declares, deleted afterwards."""

from __future__ import annotations

import uuid

import pytest
from elasticsearch import Elasticsearch
from es_double import ElasticsearchDouble
from es_logs_support import REAL_URL
from fault_proxy import FaultProxy

from airflow_ml_provider.logs import ecs


@pytest.fixture(scope="session")
def es_double():
    with ElasticsearchDouble() as double:
        yield double


@pytest.fixture(params=["double", "real"])
def es_url(request, es_double) -> str:
    if request.param == "real":
        if not REAL_URL:
            pytest.skip("ELASTICSEARCH_URL is not set: contract tests run against the test double only")
        return REAL_URL
    return es_double.url


@pytest.fixture
def es(es_url) -> Elasticsearch:
    client = Elasticsearch(es_url, request_timeout=30)
    yield client
    client.close()


@pytest.fixture
def index(es) -> str:
    name = f"aml-logs-test-{uuid.uuid4().hex[:12]}"
    es.indices.create(index=name, mappings=ecs.mappings())
    yield name
    es.indices.delete(index=name, ignore_unavailable=True)


@pytest.fixture
def proxy(es_url):
    """A FaultProxy in front of the cluster under test."""
    fault_proxy = FaultProxy(es_url)
    yield fault_proxy
    fault_proxy.close()
