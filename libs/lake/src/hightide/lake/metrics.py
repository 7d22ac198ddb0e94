"""The archiver's Prometheus metrics, on a registry of its own.

Room: libs/lake. Kafka has no archiver, so the names are Hightide's (`hightide_archiver_*`); counters end in
`_total` as Prometheus' client adds it. Like `runtime.metrics`, it never uses the global registry.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from hightide.lake.writer import WriteResult

WRITE_SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ArchiverMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._highest_stream_sequence = 0
        self.messages = self._counter("messages", "EVENTS messages newly archived into the lake.")
        self.events = self._counter("events", "Events written into the lake.")
        self.files = self._counter("files", "Parquet files written into the lake.")
        self.skipped = self._counter("skipped_messages", "Messages delivered again that the lake already held.")
        self.quarantined = self._counter("quarantined_messages", "Messages that did not decode, kept as raw bytes.")
        self.fetch_errors = self._counter("fetch_errors", "Failed fetches from the EVENTS stream (retried).")
        self.write_errors = self._counter("write_errors", "Failed writes into the lake (retried).")
        self.stream_sequence = Gauge(
            "hightide_archiver_acknowledged_stream_sequence",
            "The highest EVENTS stream sequence this archiver has written and acknowledged.",
            registry=self.registry,
        )
        self.write_seconds = Histogram(
            "hightide_archiver_write_seconds",
            "Time to write one fetched batch into the lake, fsyncs and renames included.",
            buckets=WRITE_SECONDS_BUCKETS,
            registry=self.registry,
        )

    def _counter(self, name: str, documentation: str) -> Counter:
        return Counter(f"hightide_archiver_{name}", documentation, registry=self.registry)

    def observe(self, result: WriteResult, seconds: float, last_stream_sequence: int) -> None:
        assert seconds >= 0, seconds
        self.messages.inc(result.messages)
        self.events.inc(result.events)
        self.files.inc(result.files)
        self.skipped.inc(result.skipped)
        self.quarantined.inc(result.quarantined)
        self.write_seconds.observe(seconds)
        self._highest_stream_sequence = max(self._highest_stream_sequence, last_stream_sequence)
        self.stream_sequence.set(self._highest_stream_sequence)
