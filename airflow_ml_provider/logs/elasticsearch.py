"""LogSource over log documents in Elasticsearch (Filebeat/ECS), read in order with search_after."""

from __future__ import annotations

from typing import Any

from elasticsearch import ApiError, Elasticsearch, TransportError

from airflow_ml_provider.logs.ecs import EcsFields, getter
from airflow_ml_provider.logs.source import LogBatch, LogLine, LogSource, LogSourceUnavailable

MAX_PAGE = 10_000  # Elasticsearch's default index.max_result_window caps one page
# A _shard_doc after every document: with a PIT, search_after (line key + this) skips every copy of the
# cursor's line, including a copy shipped twice, whichever PIT the cursor came from.
_AFTER_ANY_COPY = 2**63 - 1


class ElasticsearchLogSource(LogSource):
    """One job's lines from all its pods, ordered by (timestamp, offset, tiebreaker): a total order,
    since those three identify a line (see EcsFields).

    The cursor is ``{"after": <the last line's sort values>, "pit": <point-in-time id or None>}``. The
    sort values alone fix the position, so a cursor stays valid across an expired point in time, an
    Elasticsearch restart or a triggerer restart. The point in time is an optimization for paging
    through a backlog (one consistent snapshot, the index pattern resolved once): opened when a page
    comes back full, closed once caught up, because a PIT never shows documents indexed after it.

    A line is read only once it is ``settle_s`` old by Elasticsearch's clock, so a line a slow
    shipper delivers late still lands ahead of the cursor; ``settle_s`` must exceed the shipping delay
    (Filebeat's flush timeout plus the index refresh interval).
    """

    def __init__(self, client: Elasticsearch, index: str, job: str, *, namespace: str | None = None,
                 fields: EcsFields = EcsFields(), settle_s: float = 5.0, use_pit: bool = True,
                 keep_alive: str = "2m"):
        if not job:
            raise ValueError("job: the job name to read logs of is empty")
        self.client = client
        self.index = index
        self.job = job
        self.namespace = namespace
        self.fields = fields
        self.settle_s = float(settle_s)
        self.use_pit = use_pit
        self.keep_alive = keep_alive
        self._source_of, self._message_of = getter(fields.source), getter(fields.message)

    def read(self, cursor: dict[str, Any] | None = None, max_lines: int = 5000) -> LogBatch:
        after, pit = (cursor or {}).get("after"), (cursor or {}).get("pit")
        size = max(1, min(int(max_lines), MAX_PAGE))
        try:
            hits, pit = self._page(after, pit, size)
            pit = self._keep_or_drop_pit(pit, full=len(hits) == size)
        except TransportError as exc:
            raise LogSourceUnavailable(f"Elasticsearch unreachable ({type(exc).__name__}: {exc.message})") \
                from exc
        except ApiError as exc:
            if exc.meta.status >= 500 or exc.meta.status == 429:
                raise LogSourceUnavailable(f"Elasticsearch answered {exc.meta.status} ({exc.message})") \
                    from exc
            raise
        lines = []
        for hit in hits:
            key = hit["sort"][:3]
            if key == after:  # the same line shipped twice (Filebeat delivers at least once)
                continue
            after = key
            document = hit.get("_source", {})
            lines.append(LogLine(str(self._source_of(document) or "unknown"),
                                 str(self._message_of(document) or "")))
        return LogBatch(lines, {"after": after, "pit": pit})

    def close(self, cursor: dict[str, Any] | None) -> None:
        """Release the cursor's point in time now rather than at its keep-alive expiry."""
        if cursor and cursor.get("pit"):
            self._close_pit(cursor["pit"])

    def query(self) -> dict[str, Any]:
        """This job's documents that are old enough to have all arrived."""
        filters: list[dict[str, Any]] = [{"term": {self.fields.job: self.job}}]
        if self.namespace:
            filters.append({"term": {self.fields.namespace: self.namespace}})
        if self.settle_s > 0:
            settled = f"now-{round(self.settle_s * 1000)}ms"
            filters.append({"range": {self.fields.timestamp: {"lte": settled}}})
        return {"bool": {"filter": filters}}

    def sort(self, with_pit: bool = False) -> list[dict[str, Any]]:
        names = self.fields
        order = [{names.timestamp: {"order": "asc", "unmapped_type": "date"}},
                 {names.offset: {"order": "asc", "unmapped_type": "long"}},
                 {names.tiebreaker: {"order": "asc", "unmapped_type": "keyword"}}]
        return [*order, {"_shard_doc": "asc"}] if with_pit else order

    def _page(self, after: list | None, pit: str | None, size: int) -> tuple[list[dict], str | None]:
        request = {"query": self.query(), "size": size, "track_total_hits": False,
                   "source": [self.fields.message, self.fields.source]}
        if pit:
            try:
                response = self.client.search(
                    **request, sort=self.sort(with_pit=True), pit={"id": pit, "keep_alive": self.keep_alive},
                    search_after=[*after, _AFTER_ANY_COPY] if after else None)
                return response["hits"]["hits"], response.get("pit_id", pit)
            except ApiError as exc:
                if exc.meta.status not in (400, 404):  # 404: expired, 400: unknown to this cluster
                    raise
        response = self.client.search(index=self.index, **request, sort=self.sort(), search_after=after,
                                      ignore_unavailable=True, allow_no_indices=True)
        return response["hits"]["hits"], None

    def _keep_or_drop_pit(self, pit: str | None, full: bool) -> str | None:
        if full and pit is None and self.use_pit:
            try:
                return self.client.open_point_in_time(index=self.index, keep_alive=self.keep_alive)["id"]
            except ApiError as exc:
                if exc.meta.status >= 500 or exc.meta.status == 429:
                    raise
                self.use_pit = False  # not allowed or not supported here: sorted searches alone are exact too
                return None
        if not full and pit is not None:
            self._close_pit(pit)
            return None
        return pit

    def _close_pit(self, pit: str) -> None:
        try:
            self.client.close_point_in_time(id=pit)
        except (ApiError, TransportError):
            pass  # it expires on its own after keep_alive
