"""LogSource over log documents in Elasticsearch (Filebeat/ECS): a tail that reads up to now and re-reads a
trailing overlap window, so a line shipped late is still delivered, and no line twice."""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Callable
from typing import Any

from elasticsearch import ApiError, Elasticsearch, TransportError

from airflow_ml_provider.logs.ecs import EcsFields, getter
from airflow_ml_provider.logs.source import LogBatch, LogLine, LogSource, LogSourceUnavailable

MAX_PAGE = 10_000  # Elasticsearch's default index.max_result_window caps one page


class ElasticsearchLogSource(LogSource):
    """One job's lines from all its pods, in (timestamp, offset, tiebreaker) order (see EcsFields).

    Each read returns, in that order:

    1. late lines: documents stamped at most ``overlap_s`` before the previous read began and sorting
       before the cursor's position, that this source has not returned yet. They were shipped after
       later lines had been read, so they come after those lines, when they are found;
    2. the next lines after the cursor's position, up to now (no settle delay).

    Documents are told apart by identity (index and ``_id``), not by sort key: two documents with
    equal (timestamp, offset, tiebreaker) are two lines, both returned. Re-shipping a line under a
    new ``_id`` therefore delivers it twice; shippers that may resend give documents deterministic
    ids (Filebeat's ``fingerprint`` processor; tools/filebeat_shipper.py does so).

    The cursor (JSON) is ``{"after": <sort values of the last line read in order>, "read_at": <when
    that read began, epoch s by this reader's clock>, "seen": {"<timestamp ms>": [<identity digest>,
    ...]}, "floor": <ms or null>}``; "seen" holds the lines returned that the next window covers. It is
    bounded: at most ``max_seen`` digests of 8 characters (about 30 bytes of JSON per line). Past the
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
                 max_seen: int = 10_000, clock: Callable[[], float] = time.time):
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
        self.overlap_s = float(overlap_s)
        self.max_seen = int(max_seen)
        self.clock = clock
        self._source_of, self._message_of = getter(fields.source), getter(fields.message)

    def read(self, cursor: dict[str, Any] | None = None, max_lines: int = 5000) -> LogBatch:
        cursor = cursor or {}
        after, read_at, floor = cursor.get("after"), cursor.get("read_at"), cursor.get("floor")
        seen = {int(ts): set(ids) for ts, ids in (cursor.get("seen") or {}).items()}
        started = self.clock()
        keep_from = self._window_start(started, floor)  # the next read's window: what to remember
        kept = {ts: ids for ts, ids in seen.items() if ts >= keep_from}

        def remember(hit: dict[str, Any]) -> None:
            if (ts := hit["sort"][0]) >= keep_from:
                kept.setdefault(ts, set()).add(_identity(hit))

        lines: list[LogLine] = []
        try:
            # A cursor without read_at (none yet, or an older reader's) misses nothing before ``after``.
            if after is not None and read_at is not None:
                since = self._window_start(read_at, floor)
                if since <= after[0]:
                    lines += self._late(after, since, seen, remember)
            size = min(max_lines - len(lines), MAX_PAGE - 1)
            if size > 0:
                hits, _ = self._page(self.query(), after, size)
                for hit in hits:
                    remember(hit)
                lines += map(self._line, hits)
                after = hits[-1]["sort"] if hits else after
        except TransportError as exc:
            raise LogSourceUnavailable(f"Elasticsearch unreachable ({type(exc).__name__}: {exc.message})") \
                from exc
        except ApiError as exc:
            if exc.meta.status >= 500 or exc.meta.status == 429:
                raise LogSourceUnavailable(f"Elasticsearch answered {exc.meta.status} ({exc.message})") \
                    from exc
            raise
        floor = self._cap(kept, floor)
        if floor is not None and floor < self._window_start(started, None):
            floor = None  # the window has moved past everything forgotten
        return LogBatch(lines, {"after": after, "read_at": started, "floor": floor,
                                "seen": {str(ts): sorted(ids) for ts, ids in kept.items()}})

    def query(self, since_ms: int | None = None, until_ms: int | None = None) -> dict[str, Any]:
        """This job's documents (in this namespace), stamped (a line without a time has no place in
        the order), optionally within [since_ms, until_ms]."""
        filters: list[dict[str, Any]] = [{"term": {self.fields.job: self.job}}]
        if self.namespace:
            filters.append({"term": {self.fields.namespace: self.namespace}})
        if since_ms is None:
            filters.append({"exists": {"field": self.fields.timestamp}})
        else:
            filters.append({"range": {self.fields.timestamp: {"gte": since_ms, "lte": until_ms,
                                                              "format": "epoch_millis"}}})
        return {"bool": {"filter": filters}}

    def sort(self) -> list[dict[str, Any]]:
        names = self.fields
        return [{names.timestamp: {"order": "asc", "unmapped_type": "date"}},
                {names.offset: {"order": "asc", "unmapped_type": "long"}},
                {names.tiebreaker: {"order": "asc", "unmapped_type": "keyword"}}]

    def _late(self, after: list, since: int, seen: dict[int, set[str]],
              remember: Callable[[dict[str, Any]], None]) -> list[LogLine]:
        """The window's documents up to ``after`` that were not returned before."""
        query, position, lines, limit = self.query(since, after[0]), None, [], _order(after)
        while True:
            hits, more = self._page(query, position, MAX_PAGE - 1)
            for hit in hits:
                if _order(hit["sort"]) > limit:  # at after's millisecond, past it: read on in order
                    return lines
                if _identity(hit) not in seen.get(hit["sort"][0], ()):
                    lines.append(self._line(hit))
                    remember(hit)
            if not more:
                return lines
            position = hits[-1]["sort"]

    def _page(self, query: dict[str, Any], after: list | None, size: int) -> tuple[list[dict], bool]:
        """Up to ``size`` hits after ``after``, and whether more follow. One more hit is fetched to see
        whether the page's last sort key continues past it (search_after would then skip the rest of
        that key's documents): if so, that key's documents start the next page instead. Only a page of
        one key grows, up to MAX_PAGE; more documents of a single key than that are not reached."""
        fetch = size + 1
        while True:
            hits = self._search(query, after, fetch)
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

    def _search(self, query: dict[str, Any], after: list | None, size: int) -> list[dict]:
        response = self.client.search(index=self.index, query=query, sort=self.sort(), size=size,
                                      search_after=after, source=[self.fields.message, self.fields.source],
                                      track_total_hits=False, ignore_unavailable=True, allow_no_indices=True)
        body = getattr(response, "body", response)
        hits = body.get("hits") if isinstance(body, dict) else None
        hits = hits.get("hits") if isinstance(hits, dict) else None
        if not isinstance(hits, list):
            raise LogSourceUnavailable(f"Elasticsearch answered a search without hits.hits: {_excerpt(body)}")
        for hit in hits:
            if not (isinstance(hit, dict) and isinstance(hit.get("sort"), list) and len(hit["sort"]) == 3
                    and isinstance(hit["sort"][0], int) and isinstance(hit.get("_id"), str)):
                raise LogSourceUnavailable("Elasticsearch answered a hit without its 3 sort values "
                                           f"(timestamp first) or _id: {_excerpt(hit)}")
        return hits

    def _line(self, hit: dict[str, Any]) -> LogLine:
        document = hit.get("_source") or {}
        return LogLine(str(self._source_of(document) or "unknown"), str(self._message_of(document) or ""))

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


def _identity(hit: dict[str, Any]) -> str:
    """A document's identity (``_id`` is unique within its index) as 8 characters (48 bits). Digests
    are compared only among documents stamped with the same millisecond, where a collision is
    vanishingly unlikely (under 1e-10 for a thousand documents in one millisecond)."""
    key = f"{hit.get('_index', '')}/{hit['_id']}".encode()
    return base64.urlsafe_b64encode(hashlib.blake2b(key, digest_size=6).digest()).decode()


def _order(values: list) -> tuple:
    """Sort values as Elasticsearch orders them ascending, a missing (null) value last."""
    return tuple((value is None, value) for value in values)


def _excerpt(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 300 else f"{text[:300]}..."
