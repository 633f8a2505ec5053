"""Notifications through Airflow's notifier interface (``airflow.sdk.BaseNotifier``: Slack, SMTP, HTTP
webhooks, any installed one), for the events of an ML pipeline people want to hear about: a gate
rejecting a model, a training task failing.

Failed tasks use Airflow's own ``on_failure_callback=[notifier, ...]``; the gate calls its
``notifiers`` itself, since a rejection is a successful task. ``pipeline_notifiers`` builds the
shipped pipeline's notifiers from configuration, importing a provider only when one is configured
(nothing is imported at DAG parse time otherwise).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from airflow.sdk import conf

GATE_MESSAGE = (
    "Model {{ gate.model_name }} was not promoted by {{ dag.dag_id }} (run {{ run_id }}): "
    "{{ gate.reasons | join('; ') }}"
)
FAILURE_MESSAGE = (
    "Task {{ ti.task_id }} of {{ dag.dag_id }} failed (run {{ run_id }}, try {{ ti.try_number }}): {{ exception }}"
)


def notify_all(notifiers: Iterable[Any], context: Mapping[str, Any], log: logging.Logger, **extra: Any) -> int:
    """Call every notifier with the task's context plus ``extra`` (template variables such as ``gate``);
    returns how many succeeded. A notifier that fails is logged by name and skipped: a lost message must
    not turn a decided outcome into a task failure."""
    sent = 0
    for notifier in notifiers:
        try:
            notifier({**context, **extra})
            sent += 1
        except Exception as exc:  # noqa: BLE001 - any notifier's transport error
            log.warning("Notifier %s failed: %s: %s", type(notifier).__name__, type(exc).__name__, exc)
    return sent


def pipeline_notifiers(message: str) -> list[Any]:
    """Notifiers configured for the shipped pipeline: ``[ml_training] notify_http_conn_id`` (an HTTP
    connection to a chat webhook: Slack, Teams, Google Chat...) gets ``{"text": message}`` POSTed to
    ``notify_endpoint``. Empty without configuration. Other notifiers (``SmtpNotifier``,
    ``SlackNotifier``) are one line in the DAG file."""
    conn_id = conf.get("ml_training", "notify_http_conn_id", fallback="")
    if not conn_id:
        return []
    from airflow.providers.http.notifications.http import HttpNotifier

    endpoint = conf.get("ml_training", "notify_endpoint", fallback="") or None
    return [HttpNotifier(http_conn_id=conn_id, endpoint=endpoint, json={"text": message})]
