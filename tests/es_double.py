"""TEST DOUBLE, not Elasticsearch: a loopback HTTP server speaking the small subset of Elasticsearch's
REST API this project uses, so tests can run where no Elasticsearch can be installed.

The same contract tests run against it and, when ``ELASTICSEARCH_URL`` is set, against a real
Elasticsearch, unchanged: whatever the double gets wrong shows up there. What it speaks:

- ``GET``/``HEAD /`` (cluster info), ``PUT``/``HEAD``/``DELETE /{index}``, ``/{index}/_refresh``;
- writes: ``/_bulk`` and ``/{index}/_bulk`` (``index``/``create``; a ``create`` of an existing id is
  a 409 item), ``/{index}/_doc[/{id}]``, ``/{index}/_create/{id}``;
- reads: ``/{target}/_search``, ``/_search`` with a point in time, ``/{target}/_count``,
  ``/_mget`` and ``/{index}/_mget`` (``docs`` by ``_index``/``_id``, or ``ids``; ``_source_includes``),
  ``POST /{target}/_pit?keep_alive=``, ``DELETE /_pit``; queries ``bool`` (filter, must, should,
  must_not), ``term``, ``terms``, ``match``, ``range`` (numbers, dates, ``now-N(ms|s|m|h|d)``),
  ``exists``, ``match_all``; ``sort`` on fields (``order``, ``missing``, ``unmapped_type``),
  ``_shard_doc`` and ``_doc``; ``search_after``; ``size``; ``_source`` filtering; ``track_total_hits``;
- ``filter_path`` on every answer: dotted names; objects and arrays left empty are dropped (an
  exclusion, ``-name``, or a wildcard is refused with a 400: not implemented here).

Simplifications: one shard per index; documents are searchable as soon as they are written (as if
every write refreshed); field types are inferred from values (ISO-8601 strings are dates, sorted
as epoch milliseconds, like a dynamic mapping would); an expired or unknown point in time is a 404
``search_context_missing_exception``. Every response carries ``X-Elastic-Product: Elasticsearch``,
without which the official client refuses to talk to a server.
"""

from __future__ import annotations

import bisect
import gc
import json
import operator
import re
import secrets
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

VERSION = "8.19.3"
_ALL_HIT_KEYS = frozenset({"_index", "_id", "_score", "_source", "sort"})
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}(?:[T ][\d:.,]+)?(?:Z|[+-]\d{2}:?\d{2})?$")
_DATE_MATH = re.compile(r"^now(?:(?P<sign>[+-])(?P<amount>\d+)(?P<unit>ms|s|m|h|d))?$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_WORD = re.compile(r"\w+")
_MISSING = object()


class EsError(Exception):
    def __init__(self, status: int, kind: str, reason: str):
        super().__init__(reason)
        self.status, self.kind, self.reason = status, kind, reason

    def body(self) -> dict[str, Any]:
        cause = {"type": self.kind, "reason": self.reason}
        return {"error": {"root_cause": [cause], **cause}, "status": self.status}


class _Doc:
    __slots__ = ("id", "source", "position", "typed")

    def __init__(self, doc_id: str, source: dict[str, Any], position: int):
        self.id, self.source, self.position, self.typed = doc_id, source, position, {}

    def value(self, path: str) -> Any:
        """The typed value at a dotted path (dates as epoch ms), _MISSING when absent; cached."""
        if path not in self.typed:
            raw = _lookup(self.source, path)
            self.typed[path] = _MISSING if raw is None else _typed(raw)
        return self.typed[path]


class _Index:
    def __init__(self, name: str, mappings: dict[str, Any] | None = None):
        self.name, self.mappings = name, mappings or {}
        self.docs: list[_Doc | None] = []
        self.by_id: dict[str, int] = {}
        self.generation = 0

    def put(self, doc_id: str | None, source: dict[str, Any], create: bool) -> tuple[str, int, str]:
        doc_id = doc_id or secrets.token_urlsafe(15)
        old = self.by_id.get(doc_id)
        if old is not None and create:
            raise EsError(409, "version_conflict_engine_exception",
                          f"[{doc_id}]: version conflict, document already exists")
        if old is not None:
            self.docs[old] = None
        self.by_id[doc_id] = len(self.docs)
        self.docs.append(_Doc(doc_id, source, len(self.docs)))
        self.generation += 1
        return doc_id, (200 if old is not None else 201), ("updated" if old is not None else "created")


class ElasticsearchDouble:
    """The server; ``with ElasticsearchDouble() as es: Elasticsearch(es.url)``."""

    def __init__(self) -> None:
        self.indices: dict[str, _Index] = {}
        self.pits: dict[str, dict[str, Any]] = {}
        self.lock = threading.RLock()
        self._views: dict[tuple, tuple[list, list, list]] = {}
        self.authorizations: set[str] = set()  # Authorization headers seen (the double checks none)
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> ElasticsearchDouble:
        double = self

        class Handler(_Handler):
            es = double

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="es-double", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        gc.unfreeze()  # see _bulk

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def expire_pits(self) -> None:
        """Let every point in time lapse, as if its keep_alive had passed."""
        with self.lock:
            self.pits.clear()

    def __enter__(self) -> ElasticsearchDouble:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- the API -------------------------------------------------------------------------------------

    def handle(self, method: str, path: str, params: dict[str, str], body: bytes) -> tuple[int, Any]:
        parts = [unquote(p) for p in path.strip("/").split("/") if p]
        with self.lock:
            if not parts:
                return 200, self._info()
            head, rest = parts[0], parts[1:]
            if head == "_bulk" or rest == ["_bulk"]:
                return 200, self._bulk(body, head if rest else None)
            if head == "_pit" and method == "DELETE":
                return self._close_pit(_json(body))
            if head == "_search":
                return 200, self._search(None, _json(body), params)
            if head == "_mget" or rest == ["_mget"]:
                return 200, self._mget(head if rest else None, _json(body), params)
            if head == "_refresh" or rest == ["_refresh"]:
                return 200, {"_shards": {"total": 1, "successful": 1, "failed": 0}}
            if rest == ["_search"]:
                return 200, self._search(head, _json(body), params)
            if rest == ["_count"]:
                return 200, self._count(head, _json(body))
            if rest == ["_pit"] and method == "POST":
                return 200, self._open_pit(head, params)
            if rest and rest[0] in ("_doc", "_create") and method in ("PUT", "POST"):
                return self._index_doc(head, rest[1] if len(rest) > 1 else None, _json(body),
                                       create=rest[0] == "_create" or params.get("op_type") == "create")
            if not rest:
                return self._index_admin(method, head, _json(body))
        raise EsError(400, "invalid_request", f"no handler found for uri [{path}] and method [{method}]")

    def _info(self) -> dict[str, Any]:
        return {"name": "es-double", "cluster_name": "test-double", "cluster_uuid": "double",
                "version": {"number": VERSION, "build_flavor": "default", "lucene_version": "9.12.0",
                            "minimum_wire_compatibility_version": "7.17.0",
                            "minimum_index_compatibility_version": "7.0.0"},
                "tagline": "You Know, for Search (test double)"}

    def _index_admin(self, method: str, name: str, body: dict) -> tuple[int, Any]:
        if method == "PUT":
            if name in self.indices:
                raise EsError(400, "resource_already_exists_exception", f"index [{name}] already exists")
            self.indices[name] = _Index(name, body.get("mappings"))
            return 200, {"acknowledged": True, "shards_acknowledged": True, "index": name}
        if method == "HEAD":
            return (200 if name in self.indices else 404), None
        if method == "DELETE":
            if name not in self.indices:
                raise EsError(404, "index_not_found_exception", f"no such index [{name}]")
            del self.indices[name]
            return 200, {"acknowledged": True}
        raise EsError(405, "method_not_allowed", f"{method} /{name} is not supported by the test double")

    def _index_doc(self, name: str, doc_id: str | None, source: dict, create: bool) -> tuple[int, Any]:
        index = self.indices.setdefault(name, _Index(name))
        doc_id, status, result = index.put(doc_id, source, create)
        return status, {"_index": name, "_id": doc_id, "result": result, "_version": 1}

    def _bulk(self, body: bytes, default_index: str | None) -> dict[str, Any]:
        lines = [line for line in body.split(b"\n") if line.strip()]
        if len(lines) % 2:
            raise EsError(400, "illegal_argument_exception", "bulk: pair each action with a document")
        parsed = json.loads(b"[" + b",".join(lines) + b"]")  # one parse: far faster than one per line
        items, errors = [], False
        for (action, meta), source in zip((next(iter(a.items())) for a in parsed[::2]), parsed[1::2]):
            if action not in ("index", "create"):
                raise EsError(400, "illegal_argument_exception",
                              f"bulk action [{action}] is not spoken by the test double")
            name = meta.get("_index", default_index)
            index = self.indices.get(name) or self.indices.setdefault(name, _Index(name))
            try:
                doc_id, status, result = index.put(meta.get("_id"), source, action == "create")
                items.append({action: {"_index": name, "_id": doc_id, "status": status, "result": result}})
            except EsError as exc:
                errors = True
                items.append({action: {"_index": name, "_id": meta.get("_id"), "status": exc.status,
                                       "error": {"type": exc.kind, "reason": exc.reason}}})
        gc.freeze()  # stored documents are acyclic: spare later collections from rescanning them all
        return {"took": 1, "errors": errors, "items": items}

    def _mget(self, default_index: str | None, body: dict, params: dict[str, str]) -> dict[str, Any]:
        specs = body.get("docs") or [{"_id": doc_id} for doc_id in body.get("ids", [])]
        includes = _source_includes(params["_source_includes"].split(",")
                                    if "_source_includes" in params else True)
        docs = []
        for spec in specs:
            name, doc_id = spec.get("_index", default_index), spec.get("_id")
            if name is None or doc_id is None:
                raise EsError(400, "action_request_validation_exception", "mget: each doc needs _index and _id")
            index = self.indices.get(name)
            if index is None:
                docs.append({"_index": name, "_id": doc_id, "error": {
                    "type": "index_not_found_exception", "reason": f"no such index [{name}]"}})
                continue
            position = index.by_id.get(doc_id)
            doc = index.docs[position] if position is not None else None
            if doc is None:
                docs.append({"_index": name, "_id": doc_id, "found": False})
                continue
            docs.append({"_index": name, "_id": doc_id, "_version": 1, "_seq_no": doc.position,
                         "_primary_term": 1, "found": True,
                         "_source": _filter_source(doc.source, _source_includes(spec.get("_source", True))
                                                   if "_source" in spec else includes)})
        return {"docs": docs}

    def _open_pit(self, target: str, params: dict[str, str]) -> dict[str, Any]:
        names = self._resolve(target, ignore_unavailable=False)
        pit_id = secrets.token_urlsafe(24)
        self.pits[pit_id] = {"limits": {n: len(self.indices[n].docs) for n in names},
                             "expires": time.monotonic() + _duration_s(params.get("keep_alive", "1m"))}
        return {"id": pit_id, "_shards": {"total": len(names), "successful": len(names), "failed": 0}}

    def _close_pit(self, body: dict) -> tuple[int, Any]:
        freed = self.pits.pop(body.get("id"), None) is not None
        return (200 if freed else 404), {"succeeded": True, "num_freed": int(freed)}

    def _count(self, target: str, body: dict) -> dict[str, Any]:
        matches = _compile_query(body.get("query", {"match_all": {}}))
        names = self._resolve(target, ignore_unavailable=False)
        count = sum(1 for n in names for d in self.indices[n].docs if d is not None and matches(d))
        return {"count": count, "_shards": {"total": len(names), "successful": len(names), "failed": 0}}

    def _search(self, target: str | None, body: dict, params: dict[str, str]) -> dict[str, Any]:
        pit = body.get("pit")
        if pit is not None:
            if target is not None:
                raise EsError(400, "action_request_validation_exception",
                              "[indices] cannot be used with point in time")
            state = self.pits.get(pit.get("id"))
            if state is None or state["expires"] < time.monotonic():
                self.pits.pop(pit.get("id"), None)
                raise EsError(404, "search_context_missing_exception", "No search context found for id [pit]")
            state["expires"] = time.monotonic() + _duration_s(pit.get("keep_alive", "1m"))
            limits = state["limits"]
            names = sorted(n for n in limits if n in self.indices)
        else:
            ignore = params.get("ignore_unavailable") == "true"
            names = self._resolve(target or "_all", ignore_unavailable=ignore)
            limits = None
        sort = _normalize_sort(body.get("sort"))
        keys, docs, kinds = self._view(names, sort)
        start = 0
        if body.get("search_after") is not None:
            after = body["search_after"]
            if len(after) != len(sort):
                raise EsError(400, "illegal_argument_exception",
                              f"search_after has {len(after)} value(s) but sort has {len(sort)}.")
            start = bisect.bisect_right(keys, tuple(_after_key(v, kind, clause) for v, kind, clause
                                                    in zip(after, kinds, sort)))
        matches = _compile_query(body.get("query", {"match_all": {}}))
        size = int(body.get("size", params.get("size", 10)))
        includes = _source_includes(body.get("_source", True))
        keep = _hit_keys(params.get("filter_path"))  # what of a hit the answer keeps: only that is made
        hits = []
        for position in range(start, len(docs)):
            if len(hits) >= size:
                break
            shard, doc = docs[position]
            if limits is not None and doc.position >= limits[names[shard]]:
                continue
            if not matches(doc):
                continue
            hit = {"_index": names[shard], "_id": doc.id, "_score": None} if keep is _ALL_HIT_KEYS else {
                key: value for key, value in (("_index", names[shard]), ("_id", doc.id), ("_score", None))
                if key in keep}
            if "_source" in keep:
                hit["_source"] = _filter_source(doc.source, includes)
            if "sort" in keep:
                hit["sort"] = [_sort_value(doc, shard, field) for field, _, _ in sort]
            hits.append(hit)
        response: dict[str, Any] = {"took": 1, "timed_out": False,
                                    "_shards": {"total": len(names), "successful": len(names), "skipped": 0,
                                                "failed": 0},
                                    "hits": {"max_score": None, "hits": hits}}
        if body.get("track_total_hits", True) is not False:
            total = sum(1 for shard, doc in docs
                        if (limits is None or doc.position < limits[names[shard]]) and matches(doc))
            response["hits"]["total"] = {"value": total, "relation": "eq"}
        if pit is not None:
            response["pit_id"] = pit["id"]
        return response

    def _view(self, names: list[str], sort: list[tuple]) -> tuple[list, list, list]:
        """All live documents of ``names`` in sort order with their sort keys and each sort column's
        kind (cached until the next write). Columns of one type sort on raw values (fast); mixed
        or missing values sort on (rank, value) pairs."""
        cache_key = (tuple(names), tuple((n, self.indices[n].generation) for n in names), repr(sort))
        cached = self._views.get(cache_key)
        if cached is None:
            docs = [(shard, doc) for shard, name in enumerate(names) for doc in self.indices[name].docs
                    if doc is not None]
            columns = [_column(docs, *clause) for clause in sort]
            keys = list(zip(*(values for _, values in columns)))
            order = sorted(range(len(docs)), key=keys.__getitem__)
            cached = ([keys[i] for i in order], [docs[i] for i in order], [kind for kind, _ in columns])
            if len(self._views) >= 4:  # a few views at a time bound the double's memory
                self._views.pop(next(iter(self._views)))
            self._views[cache_key] = cached
        return cached

    def _resolve(self, target: str, ignore_unavailable: bool) -> list[str]:
        names: set[str] = set()
        for pattern in target.split(","):
            if pattern in ("_all", "*"):
                names.update(self.indices)
            elif "*" in pattern:
                regex = re.compile("^" + ".*".join(map(re.escape, pattern.split("*"))) + "$")
                names.update(n for n in self.indices if regex.match(n))
            elif pattern in self.indices:
                names.add(pattern)
            elif not ignore_unavailable:
                raise EsError(404, "index_not_found_exception", f"no such index [{pattern}]")
        return sorted(names)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    es: ElasticsearchDouble

    def _dispatch(self) -> None:
        url = urlsplit(self.path)
        params = {k: v[-1] for k, v in parse_qs(url.query).items()}
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if auth := self.headers.get("Authorization"):
            self.es.authorizations.add(auth)
        gc.disable()  # a bulk request allocates millions of objects: collections meanwhile cost most
        try:
            status, payload = self.es.handle(self.command, url.path, params, body)
        except EsError as exc:
            status, payload = exc.status, exc.body()
        except (ValueError, KeyError, TypeError) as exc:
            status, payload = 400, EsError(400, "parsing_exception", f"{type(exc).__name__}: {exc}").body()
        finally:
            gc.enable()
        if "filter_path" in params and isinstance(payload, dict):
            try:
                payload = _filter_path(payload, params["filter_path"])
            except EsError as exc:
                status, payload = exc.status, exc.body()
        data = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("X-Elastic-Product", "Elasticsearch")
        self.send_header("Content-Type", "application/vnd.elasticsearch+json;compatible-with=8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _dispatch

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  (quiet: tests read output)
        pass


# --- queries, sorting, values ---------------------------------------------------------------------------

def _json(body: bytes) -> dict[str, Any]:
    return json.loads(body) if body.strip() else {}


def _lookup(source: dict[str, Any], path: str) -> Any:
    node: Any = source
    for part in path.split("."):  # the common case first: plain nested objects
        if not isinstance(node, dict) or part not in node:
            break
        node = node[part]
    else:
        return node
    if path in source:
        return source[path]
    head, dot, rest = path.partition(".")
    while dot:
        child = source.get(head)
        if isinstance(child, dict) and (value := _lookup(child, rest)) is not None:
            return value
        step, dot, rest = rest.partition(".")
        head = f"{head}.{step}"
    return None


def _typed(value: Any) -> Any:
    if isinstance(value, list):
        return _typed(value[0]) if value else _MISSING
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, str) and _ISO_DATE.match(value):
        return _epoch_ms(value)
    return value


def _epoch_ms(text: str) -> int:
    if match := _DATE_MATH.match(text):
        now = int(time.time() * 1000)
        if match["sign"] is None:
            return now
        delta = int(match["amount"]) * _UNIT_MS[match["unit"]]
        return now - delta if match["sign"] == "-" else now + delta
    return int(datetime.fromisoformat(text.replace(" ", "T")).timestamp() * 1000)


def _bound(value: Any) -> Any:
    if isinstance(value, str) and (_DATE_MATH.match(value) or _ISO_DATE.match(value)):
        return _epoch_ms(value)
    return value


def _compile_query(query: dict[str, Any]):
    """A predicate over documents for one query clause (nested bool clauses compile recursively)."""
    if not isinstance(query, dict) or len(query) != 1:
        raise EsError(400, "parsing_exception", f"expected one query clause, got {query!r}")
    (kind, spec), = query.items()
    if kind == "match_all":
        return lambda doc: True
    if kind == "bool":
        def clauses(name: str) -> list:
            value = spec.get(name, [])
            return [_compile_query(q) for q in (value if isinstance(value, list) else [value])]
        required = clauses("must") + clauses("filter")
        should, must_not = clauses("should"), clauses("must_not")
        minimum = int(spec.get("minimum_should_match", 0 if required else 1)) if should else 0

        def bool_query(doc: _Doc) -> bool:  # plain loops: this runs for every document scanned
            for query in required:
                if not query(doc):
                    return False
            for query in must_not:
                if query(doc):
                    return False
            return minimum == 0 or sum(1 for query in should if query(doc)) >= minimum
        return bool_query
    (field, arg), = spec.items()
    if kind == "term":
        wanted = _typed(arg["value"] if isinstance(arg, dict) else arg)
        return lambda doc: doc.value(field) == wanted
    if kind == "terms":
        wanted_set = {_typed(v) for v in arg}
        return lambda doc: doc.value(field) in wanted_set
    if kind == "exists":
        return lambda doc: doc.value(spec["field"]) is not _MISSING
    if kind == "match":
        text = arg["query"] if isinstance(arg, dict) else arg
        everything = isinstance(arg, dict) and arg.get("operator", "or").lower() == "and"
        tokens = set(_WORD.findall(str(text).lower()))

        def match(doc: _Doc) -> bool:
            raw = _lookup(doc.source, field)
            found = set(_WORD.findall(str(raw).lower())) if raw is not None else set()
            return tokens <= found if everything else bool(tokens & found)
        return match
    if kind == "range":
        tests = []
        for op, bound in arg.items():
            if op in ("format", "time_zone"):
                continue
            compare = {"gt": operator.gt, "gte": operator.ge, "lt": operator.lt, "lte": operator.le}[op]
            tests.append((compare, _bound(bound)))  # "now" is evaluated once per search, as in Elasticsearch

        def in_range(doc: _Doc) -> bool:  # a plain loop: this runs for every document scanned
            value = doc.value(field)
            if value is _MISSING:
                return False
            for compare, bound in tests:
                if not compare(value, bound):
                    return False
            return True
        return in_range
    raise EsError(400, "parsing_exception", f"unknown query [{kind}] (not spoken by the test double)")


def _normalize_sort(sort: Any) -> list[tuple[str, str, str]]:
    """(field, order, missing) per sort clause; no sort means index order."""
    if not sort:
        return [("_doc", "asc", "_last")]
    normalized = []
    for clause in sort if isinstance(sort, list) else [sort]:
        if isinstance(clause, str):
            normalized.append((clause, "asc", "_last"))
            continue
        (field, spec), = clause.items()
        if isinstance(spec, str):
            spec = {"order": spec}
        if field == "_score":
            raise EsError(400, "illegal_argument_exception", "the test double does not score documents")
        normalized.append((field, spec.get("order", "asc"), spec.get("missing", "_last")))
    return normalized


class _Desc:
    __slots__ = ("key",)

    def __init__(self, key: tuple):
        self.key = key

    def __lt__(self, other: _Desc) -> bool:
        return other.key < self.key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and other.key == self.key


def _comparable(value: Any, order: str, missing: str) -> Any:
    """Numbers before strings; a missing value last (or first) whatever the order."""
    if value is _MISSING or value is None:
        rank = 0 if missing == "_first" else 3
        return (rank, 0) if order == "asc" else _Desc((3 - rank, 0))
    key = (1, value) if isinstance(value, (int, float)) else (2, str(value))
    return key if order == "asc" else _Desc(key)


def _column(docs: list, field: str, order: str, missing: str) -> tuple[str, list]:
    if field in ("_shard_doc", "_doc"):
        raw = [(shard << 32) + doc.position for shard, doc in docs]
    else:
        raw = [doc.value(field) for _, doc in docs]
    if all(type(v) in (int, float) for v in raw):
        return "number", raw if order == "asc" else [-v for v in raw]
    if order == "asc" and all(type(v) is str for v in raw):
        return "string", raw
    return "mixed", [_comparable(v, order, missing) for v in raw]


def _after_key(value: Any, kind: str, clause: tuple) -> Any:
    """A search_after value as the view's column of that kind compares it."""
    _, order, missing = clause
    if kind == "number" and type(value) in (int, float):
        return value if order == "asc" else -value
    if kind == "string" and isinstance(value, str):
        return value
    if kind == "mixed":
        return _comparable(_typed(value) if value is not None else _MISSING, order, missing)
    raise EsError(400, "illegal_argument_exception",
                  f"search_after value {value!r} does not fit a {kind} sort field (test double)")


def _sort_value(doc: _Doc, shard: int, field: str) -> Any:
    if field in ("_shard_doc", "_doc"):
        return (shard << 32) + doc.position
    value = doc.value(field)
    return None if value is _MISSING else value


def _source_includes(spec: Any) -> list[str] | None:
    if spec is True or spec is None:
        return None
    if spec is False:
        return []
    if isinstance(spec, str):
        return [spec]
    if isinstance(spec, dict):
        return list(spec.get("includes", [])) or None
    return list(spec)


def _filter_source(source: dict[str, Any], includes: list[str] | None) -> dict[str, Any]:
    """The included paths only, as nested objects (the reader accepts nested and dotted keys alike)."""
    if includes is None:
        return source
    kept: dict[str, Any] = {}
    for path in includes:
        value = _lookup(source, path)
        if value is None:
            continue
        *parents, leaf = path.split(".")
        node = kept
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = value
    return kept


def _filter_path(payload: dict[str, Any], spec: str) -> dict[str, Any]:
    """``payload`` with only the paths ``spec`` names (comma-separated), as Elasticsearch filters answers."""
    return _filtered(payload, _path_tree(spec)) or {}


def _hit_keys(spec: str | None) -> frozenset[str]:
    """The keys of a search hit that ``filter_path`` keeps (all without one): a hit is made with only
    those, as Elasticsearch writes only what the filter lets through, and then filtered as any answer."""
    if spec is None:
        return _ALL_HIT_KEYS
    hits = _path_tree(spec).get("hits")
    hits = hits.get("hits") if isinstance(hits, dict) else hits
    return _ALL_HIT_KEYS if hits is True else frozenset(hits or ())


def _path_tree(spec: str) -> dict[str, Any]:
    """``filter_path``'s dotted names (comma-separated) as a tree: name -> subtree, or True where the whole
    value is kept."""
    tree: dict[str, Any] = {}
    for path in filter(None, spec.split(",")):
        names = path.split(".")
        if path.startswith("-") or "*" in path:
            raise EsError(400, "illegal_argument_exception", f"filter_path [{spec}]: exclusions and wildcards "
                                                              "are not implemented by the test double")
        node = tree
        for name in names[:-1]:
            child = node.setdefault(name, {})
            if child is True:
                break
            node = child
        else:
            node[names[-1]] = True
    return tree


def _filtered(node: Any, tree: dict[str, Any]) -> Any:
    """What of ``node`` the paths in ``tree`` reach; None where nothing (an empty object or array too)."""
    if isinstance(node, list):
        if all(sub is True for sub in tree.values()):  # named keys of each object (a page of hits): one loop
            kept = [out for item in node if isinstance(item, dict) and (
                out := item if item.keys() <= tree.keys() else {k: item[k] for k in tree if k in item})]
        else:
            kept = [value for value in (_filtered(item, tree) for item in node) if value is not None]
        return kept or None
    if not isinstance(node, dict):
        return None
    out = {}
    for key, value in node.items():
        sub = tree.get(key)
        if sub is True:
            out[key] = value
        elif sub is not None and (value := _filtered(value, sub)) is not None:
            out[key] = value
    return out or None


def _duration_s(text: str) -> float:
    match = re.fullmatch(r"(\d+)(ms|s|m|h|d)", text)
    if not match:
        raise EsError(400, "illegal_argument_exception",
                      f"failed to parse setting [keep_alive] with value [{text}]")
    return int(match[1]) * _UNIT_MS[match[2]] / 1000
