"""Runs a SearchTrigger the way the triggerer does (rebuilt from its serialized kwargs, run to its first
event) in a process of its own, so a test can kill it mid-search: ``python trigger_child.py KWARGS_JSON``."""

from __future__ import annotations

import asyncio
import json
import sys

from airflow_ml_provider.triggers.search import SearchTrigger


async def first_event(trigger: SearchTrigger):
    async for event in trigger.run():
        return event.payload


if __name__ == "__main__":
    print(json.dumps(asyncio.run(first_event(SearchTrigger(**json.loads(sys.argv[1]))))))
