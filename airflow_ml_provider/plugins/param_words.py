"""Trigger refusals in the Param's own words. Airflow refuses a trigger whose conf a Param's JSON schema
rejects with jsonschema's text ("0 is less than the minimum of 1 / Failed validating 'minimum' in
schema['allOf'][0]: {...} On instance: 0"); this ASGI middleware rewrites that one answer (a 400 from
``POST /api/v2/dags/{dag_id}/dagRuns``, given after Airflow's own authentication and permission checks) to
"Invalid input for param workers: Workers: a whole number from 1 to 64; you entered 0", from the DAG's
serialized Params. Every other request passes untouched."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from typing import Any

TRIGGER = re.compile(r"/api/v2/dags/(?P<dag_id>[^/]+)/dagRuns/?")
REFUSAL = re.compile(r"Invalid input for param (?P<name>[^:\s]+): ")
MAX_BODY = 256 * 1024  # a trigger request or refusal larger than this is passed on as it is
_SHOWN_CHARS = 40


def refusal_words(schema: Mapping[str, Any], description: str | None, value: Any) -> str:
    """What the Param accepts, in its own words (its ``bounded`` words, else its choices, else its title and
    description), and what was entered: ``Workers: a whole number from 1 to 64; you entered 0``."""
    words = next((entry["description"] for entry in schema.get("allOf", ())
                  if isinstance(entry, Mapping) and isinstance(entry.get("description"), str)), None)
    title = schema.get("title") or "This Param"
    if words is None and schema.get("enum"):
        words = f"{title}: one of {', '.join(str(choice) for choice in schema['enum'] if choice is not None)}"
    if words is None:
        words = f"{title}: {description}" if description else str(title)
    return f"{words.rstrip('. ')}; you entered {shown(value)}"


def shown(value: Any) -> str:
    """A value as the person typed it, cut short: nothing (an emptied field), a number, a quoted text."""
    if value is None:
        return "nothing"
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "..."


def _dag_params(dag_id: str):
    """The DAG's Params as the API server validated them (its serialized DAG), or None."""
    from airflow.models.serialized_dag import SerializedDagModel

    serialized = SerializedDagModel.get(dag_id)
    return serialized.dag.params if serialized is not None else None


def reworded(dag_id: str, request: bytes, answer: bytes) -> bytes | None:
    """The refusal ``answer`` in the Param's words, or None to pass it on unchanged."""
    try:
        detail = json.loads(answer)["detail"]
        conf = (json.loads(request) or {}).get("conf") or {}
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    match = REFUSAL.match(detail) if isinstance(detail, str) else None
    params = _dag_params(dag_id) if match else None
    if params is None or match["name"] not in params:
        return None
    param = params.get_param(match["name"])
    value = conf[match["name"]] if isinstance(conf, dict) and match["name"] in conf else param.value
    words = refusal_words(param.schema or {}, param.description, value)
    return json.dumps({"detail": f"Invalid input for param {match['name']}: {words}"}).encode()


class ParamRefusals:
    """ASGI middleware (a plugin's ``fastapi_root_middlewares``): see the module's docstring."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        match = TRIGGER.fullmatch(scope.get("path", "")) if scope["type"] == "http" else None
        if match is None or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        request, answer, start = bytearray(), bytearray(), {}

        async def keep_request():
            message = await receive()
            if message["type"] == "http.request" and len(request) <= MAX_BODY:
                request.extend(message.get("body", b""))
            return message

        async def reword(message):
            if message["type"] == "http.response.start":
                if message["status"] != 400:
                    start["passed"] = True
                    await send(message)
                else:
                    start.update(message)
                return
            if start.get("passed") or message["type"] != "http.response.body":
                await send(message)
                return
            answer.extend(message.get("body", b""))
            if message.get("more_body") and len(answer) <= MAX_BODY:
                return
            body = bytes(answer)
            if not message.get("more_body") and len(answer) <= MAX_BODY and len(request) <= MAX_BODY:
                body = await asyncio.to_thread(reworded, match["dag_id"], bytes(request), body) or body
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            if not message.get("more_body"):
                headers.append((b"content-length", str(len(body)).encode()))
            start["passed"] = True
            await send({"type": "http.response.start", "status": 400, "headers": headers})
            await send({"type": "http.response.body", "body": body, "more_body": message.get("more_body", False)})

        await self.app(scope, keep_request, reword)
