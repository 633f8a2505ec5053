"""Waits for a training job in the triggerer, streaming its log lines into the task log."""

from __future__ import annotations

import asyncio
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.backends.base import JobNotFound
from airflow_ml_provider.jobs.follow import JobFollower


class TrainingJobTrigger(BaseTrigger):
    """Fires once the job is terminal and its whole log has been streamed.

    The log cursor is part of the serialized state, so a trigger rebuilt after a triggerer restart
    continues right after the last line it had printed.
    """

    def __init__(self, backend: str, backend_config: dict[str, Any], job_name: str,
                 cursor: Any = None, poll_interval: float = 2.0):
        super().__init__()
        self.backend = backend
        self.backend_config = backend_config
        self.job_name = job_name
        self.cursor = cursor
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"backend": self.backend, "backend_config": self.backend_config, "job_name": self.job_name,
             "cursor": self.cursor, "poll_interval": self.poll_interval},
        )

    async def run(self):
        follower = JobFollower(get_backend(self.backend, **self.backend_config), self.job_name, self.cursor)
        while True:
            try:
                lines, status = await asyncio.to_thread(follower.step)
            except JobNotFound as exc:
                yield TriggerEvent({"job_name": self.job_name, "error": f"job vanished: {exc}"})
                return
            for line in lines:
                self.log.info("%s", line)
            self.cursor = follower.cursor
            if lines:
                continue
            if status.state.is_terminal:
                yield TriggerEvent({"job_name": self.job_name, "status": status.to_dict(), "cursor": self.cursor})
                return
            await asyncio.sleep(self.poll_interval)

    async def on_kill(self) -> None:
        """The user killed the deferred task: stop the job too."""
        backend = get_backend(self.backend, **self.backend_config)
        await asyncio.to_thread(backend.cancel, self.job_name)
