"""What every follow trigger shares: a log position that survives a triggerer restart."""

from __future__ import annotations

import asyncio
from typing import Any

from airflow_ml_provider import xcom_keys
from airflow_ml_provider.jobs.drivers import SHOWING, show_again
from airflow_ml_provider.logs.source import LogSource
from airflow_ml_provider.triggers.serialized import SerializedTrigger


def task_key(context) -> dict[str, Any]:
    """The task instance a trigger saves its log position for."""
    ti = context["ti"]
    return {"dag_id": ti.dag_id, "task_id": ti.task_id, "run_id": ti.run_id,
            "map_index": ti.map_index if ti.map_index is not None else -1}


def save_before_deferring(context, state: dict[str, Any]) -> None:
    """Save the state a trigger starts from as its durable XCom, from the task, before it defers: the
    trigger's first read then finds it (the Task SDK logs a missing XCom as an ERROR in the triggerer)."""
    context["ti"].xcom_push(xcom_keys.FOLLOW_STATE, state)


class DurableFollowTrigger(SerializedTrigger):
    """Keeps ``self.state`` (a follower's state) durable in an XCom of the task instance ``self.state_key``
    (dag_id/task_id/run_id/map_index), written with every batch of lines shown. The triggerer stores
    a trigger's arguments only when the task defers; this XCom is what lets a trigger restarted by
    another triggerer process continue after the last line shown instead of replaying the log.

    The sync XCom calls run in a thread: the triggerer's comms bridge them to its event loop, and
    ``dag.test()``'s in-process comms only have the sync form.

    The state is saved before a batch of lines is shown, marked as being shown, and confirmed in the
    next round (``jobs.drivers.follow_async``): a restart after a crash in between shows that batch
    again, labelled ``(again)``, instead of losing it or repeating it unlabelled."""

    state: dict[str, Any]
    state_key: dict[str, Any] | None

    async def _resume(self, source: LogSource | None) -> None:
        """``self.state``: the newest saved state. If the previous triggerer died showing a batch (saved
        before it is shown: ``follow_async``), that batch is shown again, labelled, and the state saved
        without the mark, so a later restart does not show it once more."""
        state = await self._newest_state()
        if SHOWING not in state:
            self.state = state
            return
        await self._save(await show_again(state, source, self.log))

    async def _newest_state(self) -> dict[str, Any]:
        """The state saved with the last batch shown, if newer than the one this trigger was built with."""
        if not self.state_key:
            return self.state
        try:
            from airflow.sdk.execution_time.xcom import XCom

            saved = await asyncio.to_thread(XCom.get_one, key=xcom_keys.FOLLOW_STATE, **self.state_key)
        except Exception as exc:  # noqa: BLE001 - no durable state: continue from the deferral's
            self.log.warning("Could not read the saved log position (%s); continuing from the deferral's", exc)
            return self.state
        if isinstance(saved, dict) and saved.get("seq", 0) > self.state.get("seq", 0):
            self.log.info("Continuing after the last log line shown before a restart (saved position %d)", saved["seq"])
            return saved
        return self.state

    async def _save(self, state: dict[str, Any]) -> None:
        self.state = state
        if not self.state_key:
            return
        try:
            from airflow.sdk.execution_time.xcom import XCom

            await asyncio.to_thread(XCom.set, key=xcom_keys.FOLLOW_STATE, value=state, **self.state_key)
        except Exception as exc:  # noqa: BLE001 - keep streaming; a restart would then repeat lines
            self.log.warning("Could not save the log position (%s); a triggerer restart may repeat lines", exc)
            self.state_key = None

