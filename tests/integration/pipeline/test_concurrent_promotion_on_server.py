"""test_concurrent_promotion.py's runs again, with the registry a real MLflow tracking server whose backend store
is PostgreSQL (tests/tracking_server.py), as a deployment has it (issue 40): the connection ml_registry_default
points at the server and its promotion_lock at that store, so the compare-and-set runs under a PostgreSQL
advisory lock; both orders leave the better model champion, and another process's promotion waits."""

from __future__ import annotations

import pytest
import tracking_server

pytestmark = [pytest.mark.integration, pytest.mark.skipif(tracking_server.unavailable() is not None,
                                                          reason=str(tracking_server.unavailable()))]

from test_concurrent_promotion import (  # noqa: E402  (the same runs and checks, on the server)
    gated,  # noqa: F401 (a fixture)
    test_the_better_model_deployed_first_stays_champion_and_the_other_is_superseded,  # noqa: F401
    test_the_better_model_deployed_second_is_compared_again_and_replaces_the_other,  # noqa: F401
    test_the_promotion_lock_holds_another_process_back,  # noqa: F401
)


@pytest.fixture(scope="module", autouse=True)
def server(tmp_path_factory):
    """The tracking server, and this process's (and its children's) registry connection to it, for the module."""
    root = tmp_path_factory.mktemp("tracking")
    with tracking_server.tracking_server(root / "mlartifacts", root / "mlflow-server.log") as started, \
            pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOW_CONN_ML_REGISTRY_DEFAULT", tracking_server.registry_connection(started))
        yield started


@pytest.fixture(scope="module")
def registry(server):
    from airflow_ml_provider.hooks.model_registry import ModelRegistryHook

    hook = ModelRegistryHook()
    settings = hook.settings()
    assert (settings.tracking_uri, settings.promotion_lock) == (server["url"], server["store"])
    return hook
