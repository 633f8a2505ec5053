"""The plugin the provider registers (``get_provider_info``'s ``plugins``). Airflow imports it in every
process that loads plugins, the DAG processor and task runners included, so this module imports nothing
heavy: the views' FastAPI app is built on its first request (``plugins.lazy_app``), and the refusal
middleware imports jsonschema and the DAG model only when it rewords a refusal."""

from __future__ import annotations

import logging
import time

_started = time.perf_counter()

from airflow.sdk.plugins_manager import AirflowPlugin  # noqa: E402

from airflow_ml_provider.plugins.param_words import ParamRefusals  # noqa: E402
from airflow_ml_provider.plugins.view_app import LazyApp  # noqa: E402

log = logging.getLogger(__name__)
IMPORT_MS = (time.perf_counter() - _started) * 1000


PREFIX = "/ml-training"


class MLTrainingPlugin(AirflowPlugin):
    """The training view on every task instance's page (a "Training" tab), and trigger refusals in the Params'
    words."""

    name = "ml_training"
    fastapi_apps = [{"app": LazyApp(), "url_prefix": PREFIX, "name": "ML Training view"}]
    fastapi_root_middlewares = [{"middleware": ParamRefusals, "name": "ML Training: Param refusals in words"}]
    external_views = [{"name": "Training", "href": PREFIX + "/ti/{DAG_ID}/{RUN_ID}/{TASK_ID}?map_index={MAP_INDEX}",
                       "destination": "task_instance", "url_route": "ml-training"}]

    @classmethod
    def on_load(cls, *args, **kwargs):
        log.info("ML Training plugin loaded in %.1f ms (its views build their app on the first request)", IMPORT_MS)
