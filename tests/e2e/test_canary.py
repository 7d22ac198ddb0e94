"""`hightide canary` against a real local cluster (its own nats-server, a controller, three brokers, each a process),
through a kill -9 of a broker and its restart.

Method: `LocalCluster` starts the processes as `hightide cluster up` does; the canary runs as a user starts it
(`hightide canary ...`, a process of its own) and the test reads what it reports the way Prometheus would, by
scraping its /metrics endpoint. Session and lag timeouts are shortened so failures are detected in seconds, and
the canary's delivery timeout is below the broker session timeout, so a partition whose leader died shows failed
sends before its new leader is elected. Every wait is a poll of a condition with a deadline. Last, the run's
event lake (the canary's own events included) passes the history audit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hightide.audit import audit
from hightide.client.local_cluster import LocalCluster, free_port, pid_alive
from hightide.lake import read_envelopes
from hightide.protocol.events import CanarySummary, RecordsConsumed, SendCompleted
from support.audited import assert_history_clean
from support.cluster_cli import active_brokers, describe, hightide, wait_for

pytestmark = pytest.mark.slow

CONFIG = [
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=300",
    "replica.lag.time.max.ms=1000",
    "controller.lease.ms=2000",
    "replica.fetch.backoff.ms=200",
]
TOPIC = "__hightide_canary"
Samples = dict[tuple[str, str], float]  # (sample name, partition label or "") -> value


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    local = LocalCluster(tmp_path / "cluster")
    local.up(brokers=3, controllers=1, cluster_id="e2e", config=CONFIG)
    try:
        wait_for(lambda: len(active_brokers(local)) == 3, 60, "three active brokers")
        yield local
    finally:
        local.down()


def start_canary(cluster: LocalCluster, port: int, log: Path) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-m",
        "hightide.client.cli",
        "canary",
        "--rate",
        "60",
        "--http-port",
        str(port),
        "--availability-window-ms",
        "3000",
        "--summary-interval-ms",
        "2000",
        "--topic-management-interval-ms",
        "2000",
        "--producer-property",
        "delivery.timeout.ms=2500",
        "--producer-property",
        "request.timeout.ms=2000",
        "--data-dir",
        str(cluster.data_dir),
    ]
    with log.open("wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)


def scrape(port: int) -> Samples:
    """The canary's metrics, or {} while it does not answer yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return {}
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, sample.labels.get("partition", ""))] = sample.value
    return samples


def per_partition(samples: Samples, name: str) -> dict[int, float]:
    return {int(p): v for (n, p), v in samples.items() if n == name and p != ""}


def partition_line(cluster: LocalCluster, partition: int) -> dict[str, str]:
    """The partition's `topic describe` columns, or {} while no broker answers (all of them may be down)."""
    lines = describe(cluster, TOPIC)
    return lines[partition] if len(lines) > partition else {}


def outbox_adopted(cluster: LocalCluster, broker: int) -> bool:
    """Whether a restarted broker has relayed what its killed predecessor left in the outbox (the events of its
    last moments): only its own outbox is left. Until then the event store lacks them, and the audit would judge
    a history with a hole in it."""
    return len(list((cluster.data_dir / f"broker-{broker}" / "events-outbox").glob("*.outbox"))) == 1


def produce_errors(samples: Samples, partition: int) -> float:
    return sum(v for (n, p), v in samples.items() if n == "hightide_canary_produce_error_total" and p == str(partition))


def healthy(port: int, partitions: int, consumed_at_least: dict[int, float]) -> Samples | None:
    """The samples once every partition is checked, every availability is 1.0 and each partition has read more
    than `consumed_at_least` of it; else None."""
    samples = scrape(port)
    produce = per_partition(samples, "hightide_canary_produce_availability")
    consume = per_partition(samples, "hightide_canary_consume_availability")
    consumed = per_partition(samples, "hightide_canary_records_consumed_total")
    if len(produce) != partitions or len(consumed) != partitions:
        return None
    if any(v != 1.0 for v in [*produce.values(), *consume.values()]):
        return None
    if any(consumed[p] <= consumed_at_least.get(p, 0) for p in consumed):
        return None
    return samples


def assert_nothing_lost_or_duplicated(samples: Samples, partitions: int = 3) -> None:
    for name in ("records_lost", "records_duplicated", "records_reordered"):
        counts = per_partition(samples, f"hightide_canary_{name}_total")
        assert len(counts) == partitions and not any(counts.values()), f"{name}: {counts}"


def test_the_canary_sees_a_killed_brokers_partitions_fail_and_recover_and_loses_nothing(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    port = free_port()
    log = tmp_path / "canary.log"
    canary = start_canary(cluster, port, log)
    try:
        # Given a canary on a healthy cluster: a partition led by each broker, all available, nothing lost.
        before = wait_for(lambda: healthy(port, 3, {}), 90, f"a healthy canary (log {log})")
        assert_nothing_lost_or_duplicated(before)
        leaders = {int(p["Partition"]): int(p["Leader"]) for p in describe(cluster, TOPIC)}
        assert sorted(leaders.values()) == [1, 2, 3], leaders
        assert all(p["Replicas"].split(",")[0] == p["Leader"] for p in describe(cluster, TOPIC))

        # When the leader of partition 1 is killed, then that partition's sends fail (its availability dips).
        victim = leaders[1]
        state = cluster.read_state()
        assert state is not None
        errors_before = produce_errors(before, 1)
        os.kill(state.brokers[str(victim)], signal.SIGKILL)
        wait_for(lambda: produce_errors(scrape(port), 1) > errors_before, 30, "failed sends to the dead leader")

        # And after it restarts (and the canary gives it back its preferred leadership), every partition is
        # available again, every partition reads on, and no acknowledged record was lost or read twice.
        cluster.start_broker(victim)
        wait_for(lambda: [p["Isr"].count(",") for p in describe(cluster, TOPIC)] == [2, 2, 2], 60, "full ISRs")
        wait_for(lambda: outbox_adopted(cluster, victim), 60, "the killed broker's outbox relayed")
        consumed = per_partition(scrape(port), "hightide_canary_records_consumed_total")
        after = wait_for(lambda: healthy(port, 3, consumed), 60, "the canary healthy again")
        assert_nothing_lost_or_duplicated(after)
        wait_for(lambda: partition_line(cluster, 1).get("Leader") == str(victim), 30, "the preferred leader back")
    finally:
        canary.send_signal(signal.SIGTERM)
        returncode = canary.wait(timeout=60)
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert returncode == 0, log.read_text()[-2000:]
    stopped = next(line for line in lines if line["event"] == "canary_stopped")
    assert stopped["records_lost"] == 0 and stopped["records_duplicated"] == 0, stopped
    assert stopped["records_consumed"] > 0 and stopped["produce_errors"] > 0, stopped

    # The run's history: the canary's events reached the lake, and the audit finds every invariant kept.
    cluster.down()
    envelopes = [envelope for _, envelope in read_envelopes(cluster.lake)]
    canary_events = [e for e in envelopes if e.emitter.service == "canary"]
    kinds = {type(e.event) for e in canary_events}
    assert {SendCompleted, RecordsConsumed, CanarySummary} <= kinds, kinds
    assert_history_clean(cluster.lake)


def test_a_joining_broker_gets_a_partition_it_leads_and_a_restarted_canary_starts_over_cleanly(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    port = free_port()
    first = start_canary(cluster, port, tmp_path / "canary-1.log")
    try:
        wait_for(lambda: healthy(port, 3, {}), 90, "a healthy canary")
        # When a fourth broker joins, then the canary adds a partition it leads and checks it too.
        cluster.start_broker(4)
        wait_for(lambda: len(active_brokers(cluster)) == 4, 60, "four active brokers")
        partitions = wait_for(lambda: healthy(port, 4, {}), 60, "the canary checking four partitions")
        assert_nothing_lost_or_duplicated(partitions, 4)
        assert {p["Partition"]: p["Replicas"].split(",")[0] for p in describe(cluster, TOPIC)}["3"] == "4"
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=60) == 0
    # When the canary restarts (a new incarnation, on the same topic), then it reads on from the log end: the
    # first run's records are not its own, and nothing is lost, duplicated or reordered.
    second = start_canary(cluster, port, tmp_path / "canary-2.log")
    try:
        again = wait_for(lambda: healthy(port, 4, {}), 90, "the restarted canary healthy")
        assert_nothing_lost_or_duplicated(again, 4)
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=60) == 0
    cluster.down()
    summaries = [e for _, e in read_envelopes(cluster.lake) if isinstance(e.event, CanarySummary)]
    assert len({e.emitter.incarnation for e in summaries}) == 2  # one outbox incarnation per run
    assert all(e.event.records_lost == 0 for e in summaries)  # type: ignore[attr-defined]
    assert_history_clean(cluster.lake)


def test_cluster_up_with_the_canary_runs_it_shows_it_and_stops_it_first(tmp_path: Path) -> None:
    """`hightide cluster up --canary` (and so `make run CANARY=1`): the canary is the cluster's, in cluster.json and
    `cluster status`, and `cluster down` stops it cleanly before the brokers."""
    local = LocalCluster(tmp_path / "cluster")
    try:
        up = hightide(local.data_dir, "cluster", "up", "--detach", "--canary", "--config", *CONFIG[:1])
        assert up.returncode == 0, up.stderr
        state = local.read_state()
        assert state is not None and state.canary is not None and state.canary_http_port is not None
        port = state.canary_http_port
        wait_for(lambda: healthy(port, 3, {}), 90, "the cluster's canary healthy")
        shown = hightide(local.data_dir, "cluster", "status")
        assert f"Canary: http://127.0.0.1:{port}/metrics\tPid: {state.canary}\n" in shown.stdout
    finally:
        local.down()
    log = (local.data_dir / "logs" / "canary.log").read_text()
    stopped = [json.loads(line) for line in log.splitlines() if '"canary_stopped"' in line]
    assert len(stopped) == 1 and stopped[0]["records_lost"] == 0, log[-2000:]
    assert not pid_alive(state.canary)
    assert_history_clean(local.lake)


def test_the_canary_sees_an_unclean_election_rewind_the_log_and_the_audit_names_the_loss(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """The canary can fail: a partition whose ISR has died elects, uncleanly, a replica that missed acknowledged
    records. The canary's consumer finds its position beyond the new leader's log end, starts over from the log
    start and reads its records again (duplicated), and then, at offsets whose acknowledged records the new leader
    never had, other records: those acknowledged records are lost. The audit names the same loss, attributed to the
    unclean election (Kafka's promise does not cover it)."""
    port = free_port()
    log = tmp_path / "canary.log"
    canary = start_canary(cluster, port, log)
    try:
        wait_for(lambda: healthy(port, 3, {}), 90, f"a healthy canary (log {log})")
        altered = hightide(cluster.data_dir, "topic", "alter", TOPIC, "--config", "unclean.leader.election.enable=true")
        assert altered.returncode == 0, altered.stderr
        partition = describe(cluster, TOPIC)[0]
        leader, follower, stale = (int(b) for b in partition["Replicas"].split(","))
        state = cluster.read_state()
        assert state is not None
        # Given a replica that stopped (out of the ISR) while records went on being acknowledged without it,
        os.kill(state.brokers[str(stale)], signal.SIGKILL)
        wait_for(lambda: str(stale) not in partition_line(cluster, 0).get("Isr", str(stale)), 30, "the ISR shrunk")
        acknowledged = per_partition(scrape(port), "hightide_canary_records_acknowledged_total")[0]
        wait_for(
            lambda: per_partition(scrape(port), "hightide_canary_records_acknowledged_total")[0] > acknowledged + 20,
            30,
            "records acknowledged by the smaller ISR",
        )
        # when the whole ISR dies and the stale replica comes back alone, it is elected uncleanly,
        os.kill(state.brokers[str(leader)], signal.SIGKILL)
        os.kill(state.brokers[str(follower)], signal.SIGKILL)
        cluster.start_broker(stale)
        wait_for(lambda: partition_line(cluster, 0).get("Leader") == str(stale), 60, "the unclean election")
        cluster.start_broker(leader)
        cluster.start_broker(follower)
        wait_for(lambda: len(active_brokers(cluster)) == 3, 60, "the killed brokers back")
        wait_for(lambda: all(outbox_adopted(cluster, b) for b in (leader, follower, stale)), 60, "outboxes relayed")
        # then the canary, reset to the log start, reads its own records again, and finds the acknowledged ones
        # the new leader lacked replaced by later records.
        wait_for(
            lambda: per_partition(scrape(port), "hightide_canary_records_duplicated_total").get(0, 0) > 0,
            60,
            "records read a second time",
        )
        wait_for(
            lambda: per_partition(scrape(port), "hightide_canary_records_lost_total").get(0, 0) > 0,
            60,
            "acknowledged records found lost",
        )
    finally:
        canary.send_signal(signal.SIGTERM)
        assert canary.wait(timeout=60) == 0
    cluster.down()
    findings = audit([envelope for _, envelope in read_envelopes(cluster.lake)])
    assert not [f for f in findings if f.is_violation], [f.detail for f in findings if f.is_violation][:5]
    assert any(f.cause == "unclean_election" and f.topic == TOPIC for f in findings), [f.detail for f in findings]
