"""`hightide bench` runs as a user runs it, prints its figures, and cleans up after itself.

Method: run the installed `hightide` command in a subprocess with tiny sizes (this checks the command works;
the numbers themselves are never asserted — speed goals live in `make bench`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def _hightide(*args: str) -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).parent / "hightide"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


def test_bench_prints_every_storage_figure_as_json_and_leaves_no_files(tmp_path: Path) -> None:
    storage = [arg for name in ("append", "read", "encode", "recovery") for arg in ("--workload", name)]
    result = _hightide(
        "bench", *storage, "--format", "json", "--duration", "0.05", "--size-mib", "2", "--recovery-mib", "4",
        "--data-dir", str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    names = {(f["workload"], f["unit"]) for f in figures}
    assert {("append", "MB/s"), ("append", "%"), ("read", "MB/s"), ("encode", "records/s"), ("recovery", "s")} <= names
    ratio = next(f for f in figures if f["unit"] == "%")
    assert ratio["goal"] == ">= 70%" and isinstance(ratio["met"], bool)
    assert list(tmp_path.iterdir()) == []


def test_bench_usage_errors_exit_2_without_a_traceback(tmp_path: Path) -> None:
    for args in (["bench", "--workload", "nope"], ["bench", "--duration", "-1"], ["no-such-command"]):
        result = _hightide(*args, "--data-dir", str(tmp_path))
        assert result.returncode == 2, args
        assert "Traceback" not in result.stderr


def test_bench_refuses_a_config_and_says_it_ignores_the_cluster_address(tmp_path: Path) -> None:
    """The benchmarks start their own clusters, so a setting meant for a cluster would change nothing: a `--config` is
    refused before anything runs, and `--nats-url` / `--cluster-id` (which every subcommand accepts) are named as
    ignored on stderr, rather than silently dropped."""
    encode = ["bench", "--workload", "encode", "--duration", "0.05", "--data-dir", str(tmp_path)]
    refused = _hightide(*encode, "--config", "nats.credentials.file=x")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "--config nats.credentials.file=x" in refused.stderr and refused.stdout == ""
    ignored = _hightide(*encode, "--nats-url", "nats://127.0.0.1:1", "--cluster-id", "c")
    assert ignored.returncode == 0, ignored.stderr
    assert "--nats-url ignored" in ignored.stderr and "--cluster-id ignored" in ignored.stderr
    assert "records/s" in ignored.stdout


def test_the_produce_bench_runs_a_cluster_beside_the_nats_baselines_and_stops_everything(tmp_path: Path) -> None:
    """A tiny run (--duration scales the record counts and the latency run): every figure is there, with the
    goals of the cluster issue, and the cluster's processes and files are gone afterwards."""
    result = _hightide(
        "bench", "--workload", "produce", "--format", "json", "--duration", "0.05", "--data-dir", str(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    figures = {f["name"]: f for f in json.loads(result.stdout)}
    goals = {f["goal"] for f in figures.values() if f["goal"] is not None}
    assert goals == {">= 250,000/s", ">= 15x", ">= 0.5x", "<= 10 ms", "<= 15%"}
    ours = figures["hightide produce acks=all RF=3 100 B"]
    assert ours["value"] > 0 and ours["baseline"] == figures["baseline: jetstream R3 publish 100 B"]["value"]
    assert figures["hightide produce->consume 100 B p99 at 10,000/s"]["value"] > 0
    off = figures["hightide produce acks=all RF=3 100 B, event emission off"]["value"]
    cost = figures["event emission's cost in 100 B records/s"]["value"]
    assert off > 0 and abs(cost - 100 * (1 - ours["value"] / off)) < 1e-6
    assert list(tmp_path.iterdir()) == []
    assert not _processes_mentioning(str(tmp_path)), "a process of the bench cluster is still running"


def test_the_kafka_bench_measures_confluent_kafka_beside_the_own_client_on_one_cluster(tmp_path: Path) -> None:
    """A tiny run of the Kafka-listener workload (issue 15): confluent-kafka's throughput at 100 B and 16 KiB and
    its produce-to-consume percentiles are measured over the listener with librdkafka's default producer, each beside
    the own client's figure of the same run with the issue's goal; the idempotent producer's figures beside them with
    no goal; both clients' 16 KiB runs again with the client on a CPU of its own; and the cluster is gone
    afterwards."""
    result = _hightide(
        "bench", "--workload", "kafka", "--format", "json", "--duration", "0.05", "--data-dir", str(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    figures = {f["name"]: f for f in json.loads(result.stdout)}
    assert {f["workload"] for f in figures.values()} == {"kafka"}
    small = figures["confluent-kafka acks=all RF=3 100 B"]
    assert small["value"] > 0 and small["baseline"] == figures["hightide produce acks=all RF=3 100 B"]["value"]
    assert small["goal"] == ">= own client's" and small["met"] == (small["value"] >= small["baseline"])
    large = figures["confluent-kafka acks=all RF=3 16 KiB (MB/s)"]
    assert large["value"] > 0 and large["baseline"] == figures["hightide produce acks=all RF=3 16 KiB (MB/s)"]["value"]
    assert large["goal"] == ">= own client's" and large["met"] == (large["value"] >= large["baseline"])
    for name, own in (("100 B", small), ("16 KiB (MB/s)", large)):
        beside = figures[f"confluent-kafka idempotent acks=all RF=3 {name}"]
        assert beside["value"] > 0 and beside["baseline"] == own["baseline"] and beside["goal"] is None
    p99 = figures["confluent-kafka produce->consume 100 B p99 at 10,000/s"]
    assert p99["value"] > 0 and p99["goal"] == "<= 10 ms"
    assert p99["baseline"] == figures["hightide produce->consume 100 B p99 at 10,000/s"]["value"]
    assert figures["confluent-kafka produce->consume 100 B p50 at 10,000/s"]["value"] <= p99["value"]
    idempotent = figures["confluent-kafka idempotent produce->consume 100 B p99 at 10,000/s"]
    assert idempotent["value"] > 0 and idempotent["goal"] is None
    assert figures["confluent-kafka idempotent produce->consume 100 B p50 at 10,000/s"]["value"] <= idempotent["value"]
    # The 16 KiB runs with the client on a CPU of its own, beside each other with no goal, where there are two CPUs.
    apart = {name: f for name, f in figures.items() if "client on a CPU of its own" in name}
    if len(os.sched_getaffinity(0)) >= 2:
        own = apart.pop("hightide produce acks=all RF=3 16 KiB (MB/s, client on a CPU of its own)")
        theirs = apart.pop("confluent-kafka idempotent acks=all RF=3 16 KiB (MB/s, client on a CPU of its own)")
        assert own["value"] > 0 and theirs["value"] > 0 and theirs["baseline"] == own["value"]
        assert theirs["goal"] is None and own["goal"] is None
    assert apart == {}
    assert list(tmp_path.iterdir()) == []
    assert not _processes_mentioning(str(tmp_path)), "a process of the bench cluster is still running"


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # the process ended while we looked
        if text in argv:
            found.append(argv)
    return found
