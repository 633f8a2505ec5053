"""LogSource over log documents in Elasticsearch (Filebeat/ECS): a tail that reads up to now and re-reads a
trailing overlap window, so a line shipped late is still delivered, and no line twice."""

from __future__ import annotations

import time
from binascii import b2a_base64
from hashlib import blake2b
from itertools import repeat
from typing import Any

from elasticsearch import ApiError, Elasticsearch, TransportError

from airflow_ml_provider.logs.ecs import EcsFields, column
from airflow_ml_provider.logs.source import LogBatch, LogLine, LogSource, LogSourceUnavailable

MAX_PAGE = 10_000  # Elasticsearch's default index.max_result_window caps one page
_DIGEST_CHARS = 8  # a document's identity digest (see _identity): 6 bytes, urlsafe base64
_URLSAFE = bytes.maketrans(b"+/", b"-_")
_NO_SOURCE: dict[str, Any] = {}
_PAGE_PATH = ["timed_out", "hits.hits._source", "hits.hits.sort"]  # what a search answer is read for
_IDS_PATH = [*_PAGE_PATH, "hits.hits._index", "hits.hits._id"]  # and a document's identity (see _identity)


class ElasticsearchLogSource(LogSource):
    """One job's lines from all its pods, in (timestamp, offset, tiebreaker) order (see EcsFields).

    Each read returns, in that order:

    1. late lines: documents sorting before the cursor's position, stamped no earlier than
       ``overlap_s`` before the previous read began, that this source has not returned yet. They were
       shipped after later lines had been read, so they come after those lines, when they are found;
    2. the next lines after the cursor's position, up to now (no settle delay).

    Documents are told apart by identity (index and ``_id``), not by sort key: two documents with
    equal (timestamp, offset, tiebreaker) are two lines, both returned. Re-shipping a line under a
    new ``_id`` therefore delivers it twice; shippers that may resend give documents deterministic
    ids (Filebeat's ``fingerprint`` processor; tools/filebeat_shipper.py does so).

    The cursor (JSON) is ``{"after": <sort values of the last line read in order>, "read_at": <when
    that read began, epoch s by this reader's clock>, "seen": <identity digests by timestamp, packed:
    see pack_seen>, "floor": <ms or null>, "backlog": <whether that read was full>}``; "seen" holds the
    lines returned that the next window covers. A read after a full one (or the first) reads what lies
    before the next window without asking for documents' identities, then the rest with them. It is bounded: at most ``max_seen`` digests of 8 characters (about 11 bytes per line). Past the
    cap, the oldest timestamps are forgotten and the window stops short of them ("floor"): above
    ``max_seen / overlap_s`` lines/s sustained, the window shrinks to the last ``max_seen`` lines, and
    a line later than that is missed, never repeated.

    Lines are caught if they become searchable within ``overlap_s`` of their ``@timestamp`` as this
    reader's clock sees it (clock skew between the nodes and the reader eats into the window).
    ``settle_s`` delays no read: it is how long after the job ended a final read must wait for the
    last lines to become searchable (Filebeat's flush plus the index refresh interval).
    """

    def __init__(self, client: Elasticsearch, index: str, job: str, *, namespace: str | None = None,
                 fields: EcsFields = EcsFields(), settle_s: float = 5.0, overlap_s: float = 60.0,
                 max_seen: int = 10_000):
        if not job:
            raise ValueError("job: the job name to read logs of is empty")
        if overlap_s < 0:
            raise ValueError(f"overlap_s: must be >= 0, got {overlap_s!r}")
        if max_seen < 1:
            raise ValueError(f"max_seen: must be >= 1, got {max_seen!r}")
        self.client = client
        self.index = index
        self.job = job
        self.namespace = namespace
        self.fields = fields
        self.settle_s = float(settle_s)
        self.restarts_with_job = False  # every attempt's pods carry the job's label: one ordered log
        self.overlap_s = float(overlap_s)
        self.max_seen = int(max_seen)
        self._sources_of, self._messages_of = column(fields.source), column(fields.message)

    def location(self) -> str:
        where = f" in namespace {self.namespace}" if self.namespace else ""
        return f"Elasticsearch index {self.index}: the documents of job {self.job}{where}"

    def read(self, cursor: dict[str, Any] | None = None, max_lines: int = 5000) -> LogBatch:
        cursor = cursor or {}
        after, read_at, floor = cursor.get("after"), cursor.get("read_at"), cursor.get("floor")
        seen = unpack_seen(cursor.get("seen"))
        started = time.time()
        keep_from = self._window_start(started, floor)  # the next read's window: what to remember
        kept = {ts: ids for ts, ids in seen.items() if ts >= keep_from}
        lines: list[LogLine] = []
        try:
            # A cursor without read_at (none yet, or an older reader's) misses nothing before ``after``.
            if after is not None and read_at is not None:
                since = self._window_start(read_at, floor)
                if since <= after[0]:
                    self._late(after, since, seen, kept, keep_from, lines)
            size = min(max_lines - len(lines), MAX_PAGE - 1)
            more = False
            if size > 0 and (after is None or cursor.get("backlog") and after[0] < keep_from):
                # Behind the next window: these lines' identities are never needed, so not asked for.
                hits, more = self._page(self.query(until_ms=keep_from - 1), after, size, with_ids=False)
                self._emit(hits, kept, keep_from, lines)
                after, size = hits[-1]["sort"] if hits else after, size - len(hits)
            if size > 0 and not more:
                hits, _ = self._page(self.query(), after, size)
                self._emit(hits, kept, keep_from, lines)
                after = hits[-1]["sort"] if hits else after
        except TransportError as exc:
            raise LogSourceUnavailable(f"Elasticsearch unreachable ({type(exc).__name__}: {exc.message})") \
                from exc
        except ApiError as exc:
            if exc.meta.status >= 500 or exc.meta.status == 429:
                raise LogSourceUnavailable(f"Elasticsearch answered {exc.meta.status} ({exc.message})") \
                    from exc
            raise
        except (KeyError, TypeError, IndexError, AttributeError) as exc:  # only hits are read in there
            raise LogSourceUnavailable("Elasticsearch answered a hit without the _id, _index and 3 sort values "
                                       f"(timestamp first) it must have ({type(exc).__name__}: {exc})") from exc
        floor = self._cap(kept, floor)
        if floor is not None and floor < self._window_start(started, None):
            floor = None  # the window has moved past everything forgotten
        return LogBatch(lines, {"after": after, "read_at": started, "floor": floor,
                                "seen": pack_seen(kept), "backlog": len(lines) >= max_lines})

    def query(self, since_ms: int | None = None, until_ms: int | None = None) -> dict[str, Any]:
        """This job's documents (in this namespace), stamped (a line without a time has no place in
        the order), optionally within [since_ms, until_ms] (either bound may be left out)."""
        filters: list[dict[str, Any]] = [{"term": {self.fields.job: self.job}}]
        if self.namespace:
            filters.append({"term": {self.fields.namespace: self.namespace}})
        bounds = {name: ms for name, ms in (("gte", since_ms), ("lte", until_ms)) if ms is not None}
        if bounds:
            filters.append({"range": {self.fields.timestamp: {**bounds, "format": "epoch_millis"}}})
        else:
            filters.append({"exists": {"field": self.fields.timestamp}})
        return {"bool": {"filter": filters}}

    def sort(self) -> list[dict[str, Any]]:
        names = self.fields
        return [{names.timestamp: {"order": "asc", "unmapped_type": "date"}},
                {names.offset: {"order": "asc", "unmapped_type": "long"}},
                {names.tiebreaker: {"order": "asc", "unmapped_type": "keyword"}}]

    def _late(self, after: list, since: int, seen: dict[int, set[str]], kept: dict[int, set[str]],
              keep_from: int, lines: list[LogLine]) -> None:
        """Add the window's documents up to ``after`` that were not returned before to ``lines``. The
        window is re-read without sources (sort values and ids only); the few documents it lacks are
        then fetched by index and id."""
        query, position, limit, missing = self.query(since, after[0]), None, _order(after), []
        more = True
        while more:
            hits, more = self._page(query, position, MAX_PAGE - 1, with_source=False)
            for hit in hits:
                if _order(hit["sort"]) > limit:  # at after's millisecond, past it: read on in order
                    more = False
                    break
                if _identity(hit) not in seen.get(hit["sort"][0], ()):
                    missing.append(hit)
            position = hits[-1]["sort"] if hits else position
        if missing:
            response = self.client.mget(docs=[{"_index": hit["_index"], "_id": hit["_id"]} for hit in missing],
                                        source_includes=[self.fields.message, self.fields.source])
            found = getattr(response, "body", response)["docs"]
            self._emit([{**hit, "_source": doc.get("_source")} for hit, doc in zip(missing, found)
                        if doc.get("found")], kept, keep_from, lines)

    def _emit(self, hits: list[dict], kept: dict[int, set[str]], keep_from: int, lines: list[LogLine]) -> None:
        """Append the hits' lines; remember the identity of those the next read's window covers."""
        # Hits come in sort order, timestamp first: the window's are the trailing ones, so a read far
        # behind it (a backlog) digests none, and only the window's hits are looked at here.
        for hit in reversed(hits):
            if (ts := hit["sort"][0]) < keep_from:
                break
            kept.setdefault(ts, set()).add(_identity(hit))
        lines += self._lines(hits)

    def _lines(self, hits: list[dict]) -> list[LogLine]:
        """The hits' lines, a page at a time: where every source and message is a string (nearly always),
        they are paired in C loops, no Python call per line."""
        documents = [hit.get("_source") or _NO_SOURCE for hit in hits]
        sources, messages = self._sources_of(documents), self._messages_of(documents)
        if set(map(type, sources)) - {str} or "" in sources:
            sources = [source if source.__class__ is str and source else str(source or "unknown")
                       for source in sources]
        if set(map(type, messages)) - {str}:
            messages = [message if message.__class__ is str else str(message or "") for message in messages]
        return list(map(tuple.__new__, repeat(LogLine), zip(sources, messages)))  # LogLine(source, message)

    def _page(self, query: dict[str, Any], after: list | None, size: int, with_source: bool = True,
              with_ids: bool = True) -> tuple[list[dict], bool]:
        """Up to ``size`` hits after ``after``, and whether more follow. One more hit is fetched to see
        whether the page's last sort key continues past it (search_after would then skip the rest of
        that key's documents): if so, that key's documents start the next page instead. Only a page of
        one key grows, up to MAX_PAGE; more documents of a single key than that are not reached."""
        fetch = size + 1
        while True:
            hits = self._search(query, after, fetch, with_source, with_ids)
            if len(hits) < fetch:
                return hits, False
            end, next_key = len(hits) - 1, hits[-1]["sort"]
            while end > 0 and hits[end - 1]["sort"] == next_key:
                end -= 1
            if end > 0:
                return hits[:end], True
            if fetch >= MAX_PAGE:
                return hits, True
            fetch = min(2 * fetch, MAX_PAGE)

    def _search(self, query: dict[str, Any], after: list | None, size: int, with_source: bool,
                with_ids: bool) -> list[dict]:
        """One page of hits with only what the reader uses (``filter_path``: no ``_score``, and no ``_index``
        and ``_id`` unless ``with_ids``), which spares the cluster encoding and this client decoding them."""
        source = [self.fields.message, self.fields.source] if with_source else False
        response = self.client.search(index=self.index, query=query, sort=self.sort(), size=size,
                                      search_after=after, source=source, track_total_hits=False,
                                      ignore_unavailable=True, allow_no_indices=True,
                                      filter_path=_IDS_PATH if with_ids else _PAGE_PATH)
        body = getattr(response, "body", response)
        # Filtered, an answer without hits has no "hits" at all: "timed_out" (in every answer) tells it apart.
        hits = body.get("hits", {}) if isinstance(body, dict) and "timed_out" in body else None
        hits = hits.get("hits", []) if isinstance(hits, dict) else None
        if not isinstance(hits, list):
            raise LogSourceUnavailable(f"Elasticsearch answered a search without hits.hits: {_excerpt(body)}")
        if hits and len(hits[-1]["sort"]) != 3:  # the next search continues after it
            raise LogSourceUnavailable(f"Elasticsearch answered a hit without 3 sort values: {_excerpt(hits[-1])}")
        return hits

    def _window_start(self, read_at: float, floor: int | None) -> int:
        """The first millisecond the window of a read that began at ``read_at`` covers."""
        start = int(read_at * 1000) - round(self.overlap_s * 1000)
        return start if floor is None else max(start, floor + 1)

    def _cap(self, kept: dict[int, set[str]], floor: int | None) -> int | None:
        """Keep at most ``max_seen`` digests, forgetting whole oldest timestamps; the new floor."""
        total = sum(map(len, kept.values()))
        for ts in sorted(kept):
            if total <= self.max_seen:
                break
            total -= len(kept.pop(ts))
            floor = ts
        return floor


def pack_seen(seen: dict[int, set[str]]) -> str:
    """Digests by millisecond as one string, ``<ms>:<digests>`` groups joined by ``;``: each ms in base 36,
    relative to the previous group's; the 8-character digests concatenated. About 11 bytes per line
    against 31 as JSON lists keyed by timestamp: this is most of a following trigger's state, which it
    saves with every batch of lines it shows (at 100 lines/s, a 60 s window: 66 KB instead of 186 KB)."""
    groups, previous = [], 0
    for ts in sorted(seen):
        groups.append(f"{_base36(ts - previous)}:{''.join(sorted(seen[ts]))}")
        previous = ts
    return ";".join(groups)


def unpack_seen(packed: str | dict | None) -> dict[int, set[str]]:
    """``pack_seen`` reversed; also reads the JSON lists an earlier version saved (a task deferred
    across an upgrade)."""
    if isinstance(packed, dict):
        return {int(ts): set(ids) for ts, ids in packed.items()}
    seen, ts = {}, 0
    for group in filter(None, (packed or "").split(";")):
        delta, _, digests = group.partition(":")
        ts += int(delta, 36)
        seen[ts] = {digests[i:i + _DIGEST_CHARS] for i in range(0, len(digests), _DIGEST_CHARS)}
    return seen


def _base36(number: int) -> str:
    """``number`` in base 36, as ``int(text, 36)`` reads it back (a document stamped before 1970 has a
    negative millisecond)."""
    if number < 0:
        return "-" + _base36(-number)
    digits = ""
    while True:
        number, digit = divmod(number, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[digit] + digits
        if not number:
            return digits


def _identity(hit: dict[str, Any]) -> str:
    """A document's identity (``_id`` is unique within its index) as 8 characters (48 bits). Digests
    are compared only among documents stamped with the same millisecond, where a collision is
    vanishingly unlikely (under 1e-10 for a thousand documents in one millisecond)."""
    key = f"{hit.get('_index', '')}/{hit['_id']}".encode()
    # urlsafe_b64encode's result without its two Python-level wrappers: one digest per line in the window
    return b2a_base64(blake2b(key, digest_size=6).digest(), newline=False).translate(_URLSAFE).decode()


def _order(values: list) -> tuple:
    """Sort values as Elasticsearch orders them ascending, a missing (null) value last."""
    return tuple((value is None, value) for value in values)


def _excerpt(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 300 else f"{text[:300]}..."
