"""`hightide demo`: real local clusters driven through real process faults, then the history audited.

Room: services/client. It owns the demo's schedules and nothing of the protocol: every cluster is a `LocalCluster`
of its own (its own directory under `<data-dir>/demo/`, its own nats-server port; or, with `--nats-url`, a NATS
server the user runs, each cluster under a cluster id of its own whose streams are deleted after it), faults are
signals to the service processes (kill -9, SIGSTOP), and everything it observes it reads as a user would:
`hightide` commands in processes of their own (`produce --print-acks`, `consume`, `topic describe`, `cluster
status`, `events export`), the brokers' log lines and HW checkpoint files. The audit and the report are `hightide
history audit` and `hightide history report` run the same way (`audit_run`, `report_run`): the demo only shows
their verdict.

Scenarios:

- `kip101`, the seeds' KIP-101 scenario 1 on two brokers (RF=2, min.insync.replicas=1, acks=all), run twice
  with one schedule: first with `legacy.truncate.to.high.watermark=true` (the pre-KIP-101 rule), then with
  leader epochs. m1..m5 are acknowledged and the follower B checkpoints HW 5; m6..m10 are acknowledged; B is
  killed (kill -9) before its HW checkpoint (replica.high.watermark.checkpoint.interval.ms) covers them; once B
  is fenced the leader A is frozen (SIGSTOP) so that B cannot fetch again; B restarts and starts following A
  (legacy: it truncates to its checkpointed HW 5, dropping acknowledged m6..m10); then A is killed (kill -9) and
  B is elected. Ground truth is a consumer reading the partition from B.

  In KRaft, unlike the ZooKeeper-era setting of the seeds, a broker that registers again after a crash leaves
  every ISR (Kafka's handleBrokerShutdown), so B can only take over by an unclean election: the topic allows it
  (`unclean.leader.election.enable=true`). The epoch run shows that the election itself loses nothing: B kept
  its whole log, and m6..m10 are still there. The loss in the legacy run is the truncation of committed records.
  When the freeze comes too late (B had fetched again) or the HW checkpoint ran between the acks and the kill,
  the legacy run loses nothing and is repeated, up to `KIP101_ATTEMPTS_MAX` times.
- `failover`: three brokers (RF=3, min.insync.replicas=2), an acks=all producer at `FAILOVER_RATE` records/s,
  the leader killed (kill -9) under it, restarted; every acknowledged record must be read back.

Every wait polls a condition against a deadline; every run stops its processes in a `finally`, whatever happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO, TypeVar

import nats.errors
from nats.aio.client import Client

from hightide.client.local_cluster import ClusterError, LocalCluster, pid_alive, stop_process
from hightide.runtime.nats import NatsUnavailable, connect, nats_settings
from hightide.storage.checkpoint import REPLICATION_OFFSET_CHECKPOINT, OffsetCheckpointFile, TopicPartition

SCENARIOS: Final = ("kip101", "failover")
KIP101_TOPIC: Final = "kip101"
FAILOVER_TOPIC: Final = "failover"
KIP101_ATTEMPTS_MAX: Final = 4
HEAD_RECORDS: Final = 5  # m1..m5: acknowledged and covered by the follower's HW checkpoint
TAIL_RECORDS: Final = 5  # m6..m10: acknowledged, not yet in the follower's HW checkpoint when it dies
FAILOVER_RECORDS: Final = 3000
FAILOVER_RATE: Final = 500
SESSION_TIMEOUT_MS: Final = 3000
# kip101: B restarts (a Python process: about 2 s to registration) while A is frozen; A must still hold its session
# when B registers and follows it, so A's session outlasts B's start-up by seconds.
KIP101_SESSION_TIMEOUT_MS: Final = 6000
HW_CHECKPOINT_INTERVAL_MS: Final = 2000


def cluster_config(session_timeout_ms: int) -> list[str]:
    """Failures detected in seconds, not Kafka's defaults' tens of seconds: the protocol is the same."""
    return [
        f"broker.session.timeout.ms={session_timeout_ms}",
        "broker.heartbeat.interval.ms=200",
        "controller.lease.ms=2000",
        "replica.lag.time.max.ms=2000",
        "replica.fetch.backoff.ms=100",
        f"replica.high.watermark.checkpoint.interval.ms={HW_CHECKPOINT_INTERVAL_MS}",
    ]


LEGACY: Final = "legacy.truncate.to.high.watermark=true"
CLI_TIMEOUT_S: Final = 120.0
READY_S: Final = 60.0
AUDIT_TIMEOUT_S: Final = 600.0
AUDIT_LINES_SHOWN: Final = 20

T = TypeVar("T")


class DemoError(Exception):
    """A step of the demo could not be carried out (the cluster did not get where the schedule needs it)."""


# -- progress ------------------------------------------------------------------------------------------------------


class Progress:
    """One line per step, printed as it starts and finished with what was observed."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.started = time.monotonic()

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:6.1f}s] {text}", file=self.out, flush=True)

    @contextlib.contextmanager
    def step(self, doing: str) -> Iterator[list[str]]:
        """`with progress.step("kill -9 broker 2") as seen: seen.append("its HW checkpoint reads 5")`."""
        print(f"[{time.monotonic() - self.started:6.1f}s] {doing} ...", end="", file=self.out, flush=True)
        seen: list[str] = []
        try:
            yield seen
        except BaseException:
            print(" FAILED", file=self.out, flush=True)
            raise
        print(f" {'; '.join(seen) or 'done'}", file=self.out, flush=True)


# -- results -------------------------------------------------------------------------------------------------------


@dataclass
class Verdict:
    """What `hightide history audit` (or `report`) said: its exit code and its output, as it printed them."""

    command: list[str]
    exit_code: int
    output: str

    @property
    def headline(self) -> str:
        """The verdict in one line: the first line of a success or a finding, the last (the error) of a failure."""
        lines = [line for line in self.output.splitlines() if line.strip()]
        if not lines:
            return ""
        if self.exit_code == 2 and "invalid choice: 'history'" in self.output:
            return "`hightide history` is not in this build"
        return lines[-1] if self.exit_code not in (0, 1) else lines[0]


@dataclass
class RunResult:
    """One run of a schedule: what was acknowledged, what a consumer read back at the end, and the audit."""

    scenario: str
    mode: str
    directory: Path
    acknowledged: dict[str, int] = field(default_factory=dict)  # value -> offset
    consumed: dict[str, int] = field(default_factory=dict)  # value -> offset
    truncations: list[dict[str, Any]] = field(default_factory=list)  # the restarted follower's LogTruncated
    read_back: bool = False  # whether a consumer read the partition at the end
    leader: int = -1  # the broker that led the partition when the schedule began (kip101: A)
    follower: int = -1  # kip101: B, the follower restarted with a stale HW checkpoint
    race: str = ""  # kip101: "" when every fault landed where the schedule needs it, else what went wrong
    attempts: int = 1
    lake: Path | None = None
    audit: Verdict | None = None
    audit_out: Path | None = None
    report: Verdict | None = None
    report_path: Path | None = None

    @property
    def lost(self) -> dict[str, int]:
        """Acknowledged records a consumer no longer reads (value -> acknowledged offset)."""
        if not self.read_back:
            return {}
        return {v: o for v, o in self.acknowledged.items() if self.consumed.get(v) != o}


# -- the audit and the report: `hightide history ...` as processes of their own -----------------------------------


def audit_run(lake: Path, out: Path) -> Verdict:
    """`hightide history audit --lake LAKE --out OUT`: exit 0 clean, 1 a violation found, 2 bad input."""
    return _history("audit", "--lake", str(lake), "--out", str(out))


def report_run(lake: Path, html: Path, findings: Path | None = None) -> Verdict:
    """`hightide history report --lake LAKE --out FILE.html [--findings DIR]`: with the audit's findings, the
    report draws that verdict rather than auditing the same lake a second time."""
    given = ("--findings", str(findings)) if findings is not None else ()
    return _history("report", "--lake", str(lake), "--out", str(html), *given)


def _history(*args: str) -> Verdict:
    command = [sys.executable, "-m", "hightide.client.cli", "history", *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=AUDIT_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return Verdict(command, 1, f"no answer within {AUDIT_TIMEOUT_S:.0f} s")
    return Verdict(command, done.returncode, (done.stdout + done.stderr).strip())


# -- driving a local cluster ---------------------------------------------------------------------------------------


def _cli_command(cluster: LocalCluster, *args: str) -> list[str]:
    return [sys.executable, "-m", "hightide.client.cli", *args, "--data-dir", str(cluster.data_dir)]


def cli(cluster: LocalCluster, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """`hightide <args> --data-dir <cluster>`, as a user types it."""
    command = _cli_command(cluster, *args)
    try:
        return subprocess.run(command, capture_output=True, text=True, input=stdin, timeout=CLI_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise DemoError(f"`hightide {' '.join(args)}` did not finish within {CLI_TIMEOUT_S:.0f} s") from None


def wait_for(condition: Callable[[], T | None], deadline_s: float, what: str) -> T:
    """The condition's first truthy value, polled until the deadline (then DemoError, saying what)."""
    end = time.monotonic() + deadline_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            raise DemoError(f"timed out after {deadline_s:.0f} s waiting for {what}")
        time.sleep(0.1)  # polling a condition with a deadline


def broker_states(cluster: LocalCluster) -> dict[int, bool]:
    """Registered brokers -> fenced, from `cluster status --json` ({} while no controller answers)."""
    done = cli(cluster, "cluster", "status", "--json")
    if done.returncode != 0:
        return {}
    states = json.loads(done.stdout).get("broker_states", {})
    return {int(b): bool(s["fenced"]) for b, s in states.items()}


def unfenced(cluster: LocalCluster) -> list[int]:
    return sorted(b for b, fenced in broker_states(cluster).items() if not fenced)


def describe(cluster: LocalCluster, topic: str) -> dict[str, str]:
    """Partition 0's line of `topic describe` as {column: value} ({} when there is none yet)."""
    done = cli(cluster, "topic", "describe", topic)
    for line in done.stdout.splitlines():
        if line.startswith("\t"):
            columns = line.strip("\t").split("\t")
            pairs = [c.split(": ", 1) if ": " in c else [c.rstrip(":"), ""] for c in columns]
            return {key: value for key, value in pairs}
    return {}


def leader_and_isr(cluster: LocalCluster, topic: str) -> tuple[int, list[int]] | None:
    line = describe(cluster, topic)
    if not line:
        return None
    leader = -1 if line["Leader"] == "none" else int(line["Leader"])
    return leader, [int(b) for b in line["Isr"].split(",") if b]


def wait_partition(
    cluster: LocalCluster, topic: str, ok: Callable[[int, list[int]], bool], deadline_s: float, what: str
) -> tuple[int, list[int]]:
    """Partition 0's (leader, ISR) once `ok(leader, isr)` holds (the leader is -1 while there is none)."""

    def check() -> tuple[int, list[int]] | None:
        found = leader_and_isr(cluster, topic)
        return found if found is not None and ok(*found) else None

    return wait_for(check, deadline_s, what)


def produce(
    cluster: LocalCluster, topic: str, values: Sequence[str], then: Callable[[], None] | None = None
) -> dict[str, int]:
    """acks=all, one record per value; every value's acknowledged offset (DemoError if any was not acknowledged).
    `then` runs the moment the last acknowledgement is printed, before the producer has even closed."""
    command = _cli_command(cluster, "produce", topic, "--acks", "all", "--print-acks")
    errors = cluster.data_dir / "logs" / "demo-produce.stderr"
    with (
        errors.open("w") as stderr,
        subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True) as producer,
    ):
        assert producer.stdin is not None and producer.stdout is not None
        producer.stdin.write("\n".join(values) + "\n")
        producer.stdin.close()
        acks = []
        deadline = time.monotonic() + CLI_TIMEOUT_S
        for line in producer.stdout:  # one line per outcome; the producer exits after the last
            if line.startswith("{"):
                acks.append(json.loads(line))
            if len(acks) == len(values) or time.monotonic() > deadline:
                break
        if then is not None and len(acks) == len(values) and all(a["error"] is None for a in acks):
            then()
        try:
            producer.wait(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            producer.kill()
            raise DemoError(f"produce to {topic} did not finish within {CLI_TIMEOUT_S:.0f} s") from None
    err = errors.read_text()
    failed = [a for a in acks if a["error"] is not None]
    if producer.returncode != 0 or failed or len(acks) != len(values):
        raise DemoError(f"produce to {topic} was not acknowledged: {failed or err.strip()}")
    return {a["value"]: a["offset"] for a in acks}


def consume(cluster: LocalCluster, topic: str, expected: int, timeout_ms: int = 5000) -> dict[str, int]:
    """Every record a consumer reads from the beginning (value -> offset), up to `expected` or `timeout_ms`."""
    done = cli(
        cluster,
        *("consume", topic, "--from-beginning", "--format", "json"),
        *("--max-messages", str(expected), "--timeout-ms", str(timeout_ms)),
    )
    if done.returncode != 0:
        raise DemoError(f"consume from {topic} failed: {done.stderr.strip()}")
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {r["value"]: r["offset"] for r in records}


def pid_of(cluster: LocalCluster, broker: int) -> int:
    state = cluster.read_state()
    if state is None or str(broker) not in state.brokers:
        raise DemoError(f"broker {broker} is not part of the cluster in {cluster.data_dir}")
    return state.brokers[str(broker)]


def checkpointed_high_watermark(cluster: LocalCluster, broker: int, topic: str) -> int:
    """The HW of `topic`-0 in the broker's replication-offset-checkpoint (0 when the file has none yet)."""
    path = cluster.data_dir / f"broker-{broker}" / REPLICATION_OFFSET_CHECKPOINT
    try:
        return OffsetCheckpointFile(path).read().get(TopicPartition(topic, 0), 0)
    except (OSError, ValueError):
        return 0  # being replaced as we read it: the next poll sees the new one


def service_events(cluster: LocalCluster, name: str, since: int, event: str) -> list[dict[str, Any]]:
    """The service's log lines for `event` written after byte `since` of its log (`name`: broker-2, ...)."""
    path = cluster.data_dir / "logs" / f"{name}.log"
    try:
        with path.open("rb") as log:
            log.seek(since)
            text = log.read().decode(errors="replace")
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if entry.get("event") == event:
                    found.append(entry)
    return found


def log_size(cluster: LocalCluster, name: str) -> int:
    path = cluster.data_dir / "logs" / f"{name}.log"
    return path.stat().st_size if path.exists() else 0


@contextlib.contextmanager
def running_cluster(
    directory: Path,
    progress: Progress,
    *,
    brokers: int,
    config: Sequence[str],
    cluster_id: str,
    nats_url: str | None = None,
) -> Iterator[LocalCluster]:
    """A fresh local cluster in `directory`, stopped in every case when the block ends. With `nats_url` it runs on
    that NATS server instead of a nats-server of its own, under a cluster id no other run shares, and its streams
    are deleted from that server at the end (the lake keeps the history)."""
    if directory.exists():
        shutil.rmtree(directory)
    cluster = LocalCluster(directory)
    if nats_url is not None:
        reachable(nats_url)
        cluster_id = f"{cluster_id}-{uuid.uuid4().hex[:8]}"
    starting = f"start nats-server, a controller and {brokers} brokers in {directory}"
    if nats_url is not None:
        starting = f"start a controller and {brokers} brokers in {directory} on NATS at {nats_url}"
    try:
        with progress.step(starting) as seen:
            state = cluster.up(
                brokers=brokers, controllers=1, cluster_id=cluster_id, config=list(config), nats_url=nats_url
            )
            ready = wait_for(lambda: len(unfenced(cluster)) == brokers, READY_S, f"{brokers} unfenced brokers")
            seen.append(f"{state.nats_url}, {brokers} brokers registered and unfenced" if ready else "")
        yield cluster
    finally:
        tear_down(cluster)
        if nats_url is not None:
            delete_streams(nats_url, cluster_id)


def reachable(nats_url: str) -> None:
    """DemoError unless a NATS server with JetStream answers at `nats_url` (before any process is started)."""

    async def probe() -> None:
        nc = await _connect(nats_url)
        try:
            await nc.jetstream().account_info()
        finally:
            await nc.close()

    try:
        asyncio.run(probe())
    except NatsUnavailable as error:
        raise DemoError(str(error)) from None
    except (nats.errors.Error, TimeoutError) as error:
        raise DemoError(f"NATS at {nats_url} has no JetStream: {error or type(error).__name__}") from None


async def _connect(nats_url: str) -> Client:
    return await connect(nats_settings({}, url=nats_url, name="hightide-demo"))


def delete_streams(nats_url: str, cluster_id: str) -> list[str]:
    """Delete the JetStream streams (key-value buckets included) of one cluster id from a NATS server: the names
    `hightide.protocol.subjects` gives them all begin with HT_<cluster id>_. Returns the names deleted."""
    return asyncio.run(_delete_streams(nats_url, cluster_id))


async def _delete_streams(nats_url: str, cluster_id: str) -> list[str]:
    prefixes = (f"HT_{cluster_id}_", f"KV_HT_{cluster_id}_")
    nc = await _connect(nats_url)
    try:
        js = nc.jetstream()
        names = [info.config.name for info in await js.streams_info()]
        mine = [name for name in names if name is not None and name.startswith(prefixes)]
        for name in mine:
            await js.delete_stream(name)
        return mine
    finally:
        await nc.close()


def tear_down(cluster: LocalCluster) -> None:
    """Stop everything the cluster started: cleanly where it can, kill -9 what is left."""
    with contextlib.suppress(ClusterError, OSError):
        cluster.down()
    state = cluster.read_state()
    if state is None:
        return
    for pid in state.pids():
        if pid_alive(pid):
            stop_process(pid, hard=True, timeout_s=5)


def archive_and_audit(cluster: LocalCluster, result: RunResult, progress: Progress) -> None:
    """Stop the services cleanly (their last events reach the stream), export the stream to a lake, then run the
    audit and the report over it."""
    state = cluster.read_state()
    assert state is not None
    with progress.step("stop the brokers and the controller cleanly (their last events reach the event store)"):
        for pid in state.brokers.values():
            stop_process(pid, hard=False)
        for pid in state.controllers.values():
            stop_process(pid, hard=False)
    lake = result.directory / "lake"
    with progress.step(f"hightide events export --lake {lake}") as seen:
        done = cli(cluster, "events", "export", "--lake", str(lake))
        if done.returncode != 0:
            raise DemoError(f"events export failed: {done.stderr.strip()}")
        seen.append(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "exported")
    result.lake = lake
    result.audit_out = result.directory / "audit"
    with progress.step(f"hightide history audit --lake {lake} --out {result.audit_out}") as seen:
        result.audit = audit_run(lake, result.audit_out)
        seen.append(f"exit {result.audit.exit_code}: {result.audit.headline}")
    if result.audit.exit_code in (0, 1):  # the audit's own summary, as it printed it
        for line in result.audit.output.splitlines()[1 : 1 + AUDIT_LINES_SHOWN]:
            print(f"           | {line}", file=progress.out, flush=True)
    result.report_path = result.directory / "report.html"
    audited = result.audit_out if result.audit.exit_code in (0, 1) else None  # it wrote its findings
    with progress.step("hightide history report" + (f" --findings {audited}" if audited else "")) as seen:
        result.report = report_run(lake, result.report_path, audited)
        written = result.report.exit_code == 0 and result.report_path.exists()
        seen.append(f"{result.report_path}" if written else f"exit {result.report.exit_code}: {result.report.headline}")


# -- kip101 --------------------------------------------------------------------------------------------------------


def run_kip101(
    base: Path,
    legacy: bool,
    progress: Progress,
    attempts_max: int = KIP101_ATTEMPTS_MAX,
    nats_url: str | None = None,
) -> RunResult:
    """The KIP-101 schedule, on a fresh cluster per attempt, until the legacy run loses an acknowledged record (the
    epoch run: until it completes); at most `attempts_max` attempts, the last one's DemoError propagates."""
    mode = "legacy" if legacy else "epochs"
    for attempt in range(1, attempts_max + 1):
        progress.say(f"kip101 ({mode}), attempt {attempt}: " + ("truncate to the HW" if legacy else "leader epochs"))
        result = RunResult("kip101", mode, base / f"kip101-{mode}-{attempt}", attempts=attempt)
        config = [*cluster_config(KIP101_SESSION_TIMEOUT_MS), *([LEGACY] if legacy else [])]
        with running_cluster(
            result.directory / "cluster",
            progress,
            brokers=2,
            config=config,
            cluster_id=f"kip101-{mode}",
            nats_url=nats_url,
        ) as cluster:
            try:
                result.race = _kip101_schedule(cluster, result, progress)
            except DemoError as error:
                if attempt == attempts_max:
                    raise
                progress.say(f"attempt {attempt} did not get through ({error}); trying again")
                continue
            if legacy and not result.lost and attempt < attempts_max:
                why = result.race or "every fault landed, yet nothing was lost"
                progress.say(f"the race was not won ({why}); trying again")
                continue
            archive_and_audit(cluster, result, progress)
            return result
    raise AssertionError("unreachable: the last attempt returns or raises")


@dataclass(frozen=True)
class Roles:
    """The two brokers of the kip101 schedule: A leads the partition when it starts, B follows."""

    leader: int
    follower: int


def _kip101_schedule(cluster: LocalCluster, result: RunResult, progress: Progress) -> str:
    """Drive one cluster through the schedule; '' when every fault landed where it had to, else what went wrong."""
    roles = _kip101_topic(cluster, progress)
    result.leader, result.follower = roles.leader, roles.follower
    head = [f"m{i}" for i in range(1, HEAD_RECORDS + 1)]
    tail = [f"m{i}" for i in range(HEAD_RECORDS + 1, HEAD_RECORDS + TAIL_RECORDS + 1)]
    with progress.step(f"produce {head[0]}..{head[-1]} with acks=all") as seen:
        result.acknowledged.update(produce(cluster, KIP101_TOPIC, head))
        seen.append(f"acknowledged at offsets {_offsets(result.acknowledged, head)}")
    with progress.step(f"wait for B's HW checkpoint to cover {head[-1]}") as seen:
        wait_for(
            lambda: checkpointed_high_watermark(cluster, roles.follower, KIP101_TOPIC) >= HEAD_RECORDS,
            HW_CHECKPOINT_INTERVAL_MS / 1000 + 20,
            "the follower's HW checkpoint",
        )
        hw = checkpointed_high_watermark(cluster, roles.follower, KIP101_TOPIC)
        seen.append(f"broker {roles.follower}'s replication-offset-checkpoint reads HW {hw}")
    with progress.step(f"produce {tail[0]}..{tail[-1]} with acks=all, then kill -9 B at once") as seen:
        follower_pid = pid_of(cluster, roles.follower)
        # Killed the moment the last acknowledgement is printed: the HW checkpoint must not run in between.
        result.acknowledged.update(produce(cluster, KIP101_TOPIC, tail, lambda: os.kill(follower_pid, signal.SIGKILL)))
        wait_for(lambda: not pid_alive(follower_pid), 10, "B's process gone")
        stale = checkpointed_high_watermark(cluster, roles.follower, KIP101_TOPIC)
        seen.append(f"acknowledged at {_offsets(result.acknowledged, tail)} (the leader's HW is {len(head + tail)})")
        seen.append(f"B killed; its HW checkpoint reads {stale}")
    race = [] if stale < HEAD_RECORDS + TAIL_RECORDS else ["B's HW checkpoint ran between the acks and the kill"]
    race += _kip101_faults(cluster, roles, result, progress)
    with progress.step("consume the partition from the beginning (ground truth)") as seen:
        result.consumed = consume(cluster, KIP101_TOPIC, len(result.acknowledged), timeout_ms=3000)
        result.read_back = True
        seen.append(_ground_truth(result))
    with progress.step("restart A (its events still in its outbox are relayed; it follows B)") as seen:
        cluster.start_broker(roles.leader)
        wait_for(lambda: roles.leader in unfenced(cluster), 30, "A registered and unfenced")
        seen.append(f"broker {roles.leader} is back")
    return "; ".join(race)


def _kip101_topic(cluster: LocalCluster, progress: Progress) -> Roles:
    with progress.step(
        f"create {KIP101_TOPIC}: RF=2, min.insync.replicas=1, unclean.leader.election.enable=true"
    ) as seen:
        done = cli(
            cluster,
            *("topic", "create", KIP101_TOPIC, "--partitions", "1", "--replication-factor", "2"),
            *("--config", "min.insync.replicas=1", "--config", "unclean.leader.election.enable=true"),
        )
        if done.returncode != 0:
            raise DemoError(f"topic create failed: {done.stderr.strip()}")
        leader, isr = wait_partition(cluster, KIP101_TOPIC, lambda _, isr: len(isr) == 2, 30, "a full ISR")
        roles = Roles(leader, next(b for b in isr if b != leader))
        seen.append(f"leader A = broker {roles.leader}, follower B = broker {roles.follower}, ISR {isr}")
    return roles


def _kip101_faults(cluster: LocalCluster, roles: Roles, result: RunResult, progress: Progress) -> list[str]:
    """B fenced, A frozen, B restarted and following A (legacy: truncating), A killed, B elected."""
    with progress.step("wait until the controller fences B (its session runs out) and the ISR shrinks to A") as seen:
        wait_partition(cluster, KIP101_TOPIC, lambda _, isr: isr == [roles.leader], 30, "the ISR shrink")
        seen.append(f"ISR [{roles.leader}]")
    leader_pid = pid_of(cluster, roles.leader)
    with progress.step("freeze A (SIGSTOP), so that B cannot fetch from it again") as seen:
        os.kill(leader_pid, signal.SIGSTOP)
        seen.append(f"pid {leader_pid} stopped")
    name = f"broker-{roles.follower}"
    since = log_size(cluster, name)
    with progress.step("restart B; wait until it follows A") as seen:
        cluster.start_broker(roles.follower)
        followed = wait_for(
            lambda: [e for e in service_events(cluster, name, since, "BecameFollower") if e["topic"] == KIP101_TOPIC],
            30,
            "B following A",
        )
        truncated = service_events(cluster, name, since, "LogTruncated")
        result.truncations = [e for e in truncated if e["topic"] == KIP101_TOPIC]
        seen.append(f"B follows broker {followed[0]['leader']} in leader epoch {followed[0]['leader_epoch']}")
        seen.append(_truncations(result.truncations))
    with progress.step("kill -9 A; wait for the controller to elect B") as seen:
        os.kill(leader_pid, signal.SIGKILL)
        leader, isr = wait_partition(
            cluster,
            KIP101_TOPIC,
            lambda leader, _: leader == roles.follower,
            KIP101_SESSION_TIMEOUT_MS / 1000 + 30,
            "B elected",
        )
        seen.append(f"leader broker {leader}, ISR {isr}")
    return [] if any(e["leader"] == roles.leader for e in followed) else ["A was fenced before B followed it"]


def _offsets(acknowledged: dict[str, int], values: Sequence[str]) -> str:
    offsets = [acknowledged[v] for v in values]
    return f"{min(offsets)}..{max(offsets)}"


def _truncations(truncations: Sequence[dict[str, Any]]) -> str:
    if not truncations:
        return "B truncated nothing"
    return ", ".join(
        f"B truncated its log {t['log_end_offset_before']} -> {t['truncated_to']} "
        f"(reason {t['reason']}, HW before {t['high_watermark_before']})"
        for t in truncations
    )


def _ground_truth(result: RunResult) -> str:
    lost = result.lost
    if not lost:
        return f"all {len(result.acknowledged)} acknowledged records are there"
    named = ", ".join(f"{v}@{o}" for v, o in sorted(lost.items(), key=lambda item: item[1]))
    return f"{len(lost)} acknowledged records LOST: {named}"


# -- failover ------------------------------------------------------------------------------------------------------


def run_failover(base: Path, progress: Progress, nats_url: str | None = None) -> RunResult:
    """kill -9 of the leader under an acks=all producer; every acknowledged record read back; audit and report."""
    progress.say("failover: a leader killed under an acks=all producer")
    result = RunResult("failover", "epochs", base / "failover")
    with running_cluster(
        result.directory / "cluster",
        progress,
        brokers=3,
        config=cluster_config(SESSION_TIMEOUT_MS),
        cluster_id="failover",
        nats_url=nats_url,
    ) as cluster:
        topic = FAILOVER_TOPIC
        with progress.step(f"create {topic}: RF=3, min.insync.replicas=2") as seen:
            done = cli(
                cluster,
                *("topic", "create", topic, "--partitions", "1", "--replication-factor", "3"),
                *("--config", "min.insync.replicas=2"),
            )
            if done.returncode != 0:
                raise DemoError(f"topic create failed: {done.stderr.strip()}")
            leader, isr = wait_partition(cluster, topic, lambda _, isr: len(isr) == 3, 30, "a full ISR")
            seen.append(f"leader broker {leader}, ISR {isr}")
        producer = _start_producer(cluster, topic)
        try:
            _kill_leader_under_load(cluster, topic, leader, producer, result, progress)
        finally:
            if producer.poll() is None:
                producer.kill()
                producer.communicate()
        with progress.step(f"restart broker {leader}; wait until it is back in the ISR") as seen:
            cluster.start_broker(leader)
            _, isr = wait_partition(cluster, topic, lambda _, isr: len(isr) == 3, 60, "a full ISR again")
            seen.append(f"ISR {isr}")
        with progress.step("consume the partition from the beginning (ground truth)") as seen:
            # Up to every record sent: one that failed may still be in the log, and it must not end the read early.
            result.consumed = consume(cluster, topic, FAILOVER_RECORDS, timeout_ms=10_000)
            result.read_back = True
            seen.append(_ground_truth(result))
        archive_and_audit(cluster, result, progress)
    return result


def _start_producer(cluster: LocalCluster, topic: str) -> subprocess.Popen[str]:
    command = [
        *(sys.executable, "-m", "hightide.client.cli", "produce", topic, "--acks", "all", "--print-acks"),
        *("--count", str(FAILOVER_RECORDS), "--rate", str(FAILOVER_RATE), "--data-dir", str(cluster.data_dir)),
    ]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _kill_leader_under_load(
    cluster: LocalCluster,
    topic: str,
    leader: int,
    producer: subprocess.Popen[str],
    result: RunResult,
    progress: Progress,
) -> None:
    rate_s = FAILOVER_RECORDS / FAILOVER_RATE
    with progress.step(f"produce {FAILOVER_RECORDS} records at {FAILOVER_RATE}/s with acks=all") as seen:
        wait_for(lambda: consume(cluster, topic, 1, timeout_ms=1000) or producer.poll() is not None, 30, "records")
        seen.append("records are being acknowledged")
    with progress.step(f"kill -9 the leader, broker {leader}; wait for a new leader") as seen:
        killed_at = time.monotonic()
        os.kill(pid_of(cluster, leader), signal.SIGKILL)
        new, isr = wait_partition(
            cluster, topic, lambda new, _: new not in (-1, leader), SESSION_TIMEOUT_MS / 1000 + 30, "a new leader"
        )
        seen.append(f"broker {new} leads after {time.monotonic() - killed_at:.1f} s, ISR {isr}")
    with progress.step("wait for the producer to finish") as seen:
        try:
            out, _ = producer.communicate(timeout=rate_s + 120)
        except subprocess.TimeoutExpired:
            raise DemoError("the producer did not finish") from None
        acks = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        result.acknowledged = {a["value"]: a["offset"] for a in acks if a["error"] is None}
        failed = len(acks) - len(result.acknowledged)
        seen.append(f"{len(result.acknowledged)} acknowledged, {failed} failed (exit {producer.returncode})")


# -- the command ---------------------------------------------------------------------------------------------------


def expected(result: RunResult) -> list[str]:
    """What is wrong with a run: the ground truth or the audit's verdict not as the scenario promises."""
    problems = []
    want_loss = result.mode == "legacy"
    if want_loss and not result.lost:
        problems.append(f"{result.scenario} ({result.mode}): no acknowledged record was lost in {result.attempts} runs")
    if not want_loss and result.lost:
        problems.append(f"{result.scenario} ({result.mode}): acknowledged records lost: {sorted(result.lost)}")
    want_exit = 1 if want_loss else 0
    if result.audit is None or result.audit.exit_code != want_exit:
        got = "not run" if result.audit is None else f"exit {result.audit.exit_code}: {result.audit.headline}"
        problems.append(f"{result.scenario} ({result.mode}): the audit should exit {want_exit}, it gave {got}")
    return problems


def summary(results: Sequence[RunResult], out: TextIO) -> None:
    print("\nsummary", file=out)
    for r in results:
        audit = "not run" if r.audit is None else f"exit {r.audit.exit_code}"
        attempts = f" (race won on attempt {r.attempts})" if r.mode == "legacy" and r.lost else ""
        print(f"  {r.scenario:8} {r.mode:7} {_ground_truth(r)}{attempts}; audit {audit}", file=out)
        if r.audit_out is not None:
            print(f"  {'':8} {'':7} findings: {r.audit_out}", file=out)
        if r.report_path is not None and r.report_path.exists():
            print(f"  {'':8} {'':7} report:   {r.report_path}", file=out)


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # unwinds through every run's `finally`, which stops its cluster


def run_demo(scenarios: Sequence[str], base: Path, out: TextIO = sys.stdout, nats_url: str | None = None) -> int:
    """Run the scenarios; 0 when each one's ground truth and audit are as promised, 1 otherwise. With `nats_url`
    every cluster runs on that NATS server (see `running_cluster`) instead of a nats-server of its own."""
    progress = Progress(out)
    results: list[RunResult] = []
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        for scenario in scenarios:
            if scenario == "kip101":
                results.append(run_kip101(base, legacy=True, progress=progress, nats_url=nats_url))
                results.append(run_kip101(base, legacy=False, progress=progress, nats_url=nats_url))
            else:
                results.append(run_failover(base, progress, nats_url=nats_url))
    except (DemoError, ClusterError) as error:
        summary(results, out)
        print(f"hightide demo: {error}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    summary(results, out)
    problems = [p for r in results for p in expected(r)]
    for problem in problems:
        print(f"hightide demo: {problem}", file=sys.stderr)
    return 1 if problems else 0
