"""The simulator's histories rebuild the simulated cluster's state exactly, and a damaged history does not.

Method: each simulated run keeps every event in its envelope (`Simulation.history`: brokers with one incarnation
per process start, two controllers taking turns), then `hightide.audit.rebuild` folds that history alone and the
result is compared with what the cores and the controller hold: every replica's LEO, HW, log start offset and
leader epoch cache, every partition's replicas, ISR, ELR, leader and epochs. The runs have lossy crashes (a
restart recovers a cut log), divergence truncations, controller failovers, unclean and last-known-leader
elections, retention deleting segments and moving log start offsets (followers starting over behind them), disks
refusing writes (replicas offline), and a topic deleted and created again. Then histories are damaged (an event
dropped, two swapped) and must rebuild differently or be reported. `HIGHTIDE_REBUILD_SEEDS=n` runs more seeds.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from collections.abc import Callable

import pytest

from hightide.audit.rebuild import ClusterState, rebuild
from hightide.protocol import events
from hightide.protocol.envelope import Envelope
from simulation.simulator import HEALED_STEPS_MAX, SimConfig, Simulation

STEPS = 2_000
SEEDS = int(os.environ.get("HIGHTIDE_REBUILD_SEEDS", "75"))
CHUNK = 25
CHECK_EVERY_STEPS = 100


def _chunks(seeds: int) -> list[range]:
    return [range(start, min(start + CHUNK, seeds)) for start in range(0, seeds, CHUNK)]


def _recorded(seed: int, config: SimConfig | None = None) -> Simulation:
    simulation = Simulation(seed, config)
    simulation.history = []
    return simulation


def _assert_rebuilds(simulation: Simulation, where: str) -> ClusterState:
    assert simulation.history is not None
    state = rebuild(simulation.history)
    assert state.anomalies == (), f"{where}: the history contradicts itself: {state.anomalies[:3]}"
    live = simulation.replica_states()
    differing = {key: (state.replicas.get(key), live.get(key)) for key in {*live, *state.replicas}}
    differing = {key: pair for key, pair in differing.items() if pair[0] != pair[1]}
    assert not differing, f"{where}: replicas (rebuilt, live) differ: {differing}"
    assert state.partitions == simulation.partition_states(), f"{where}: partitions differ"
    return state


def _tally(history: list[Envelope], counts: Counter[str]) -> None:
    """What a history exercised: the transitions the rebuild has to get right."""
    log_end_offsets: dict[tuple[str, int, int], int] = {}
    for envelope in history:
        event = envelope.event
        if isinstance(event, events.LogTruncated):
            counts[f"truncated: {event.reason}"] += 1
        elif isinstance(event, events.RecordsAppended):
            log_end_offsets[(event.topic, event.partition, event.replica)] = event.log_end_offset
        elif isinstance(event, events.LogOpened):
            key = (event.topic, event.partition, event.replica)
            if event.reason == "recovered" and event.log_end_offset < log_end_offsets.get(key, 0):
                counts["recovered with its tail cut"] += 1
            log_end_offsets[key] = event.log_end_offset
        elif isinstance(event, events.ControllerElected) and event.controller_epoch > 1:
            counts["controller failover"] += 1
        elif isinstance(event, events.LeaderElected):
            counts[f"elected: {event.election}"] += 1
        elif isinstance(
            event,
            events.LogStartOffsetAdvanced
            | events.LeaderEpochsTruncated
            | events.LogDeleted
            | events.SegmentRolled
            | events.SegmentDeleted,
        ):
            counts[event.TYPE] += 1


# -- the state a faulty run ends in --------------------------------------------------------------------------


@pytest.mark.parametrize("seeds", _chunks(SEEDS), ids=lambda r: f"seeds-{r.start}-{r.stop - 1}")
def test_a_faulty_runs_history_rebuilds_its_final_state(seeds: range) -> None:
    counts: Counter[str] = Counter()
    for seed in seeds:
        simulation = _recorded(seed)
        simulation.run(STEPS)
        assert simulation.history is not None
        _assert_rebuilds(simulation, f"seed {seed}")
        _tally(simulation.history, counts)
    # The runs must have exercised what makes a rebuild hard, or they proved little (measured since KAFKA-9952: per
    # 25 seeds 14-15 tails cut by lossy crashes, 18-26 divergence truncations and 19-29 controller failovers).
    for needed in ("recovered with its tail cut", "truncated: divergence", "controller failover"):
        assert counts[needed] > 0, f"seeds {seeds}: no {needed!r} in any run: {counts}"


@pytest.mark.parametrize(
    "config",
    [
        SimConfig(unclean_leader_election_enable=True, eligible_leader_replicas_enable=False),
        SimConfig(legacy_truncate_to_high_watermark=True),
    ],
    ids=["unclean-elections", "legacy-truncation"],
)
def test_unclean_elections_and_legacy_truncations_rebuild_too(config: SimConfig) -> None:
    counts: Counter[str] = Counter()
    rebuilt = 0
    for seed in range(20):
        simulation = _recorded(seed, config)
        try:
            simulation.run(STEPS)
        except AssertionError:
            continue  # these configurations may lose committed records: the invariants say so, not this test
        assert simulation.history is not None
        _assert_rebuilds(simulation, f"seed {seed}")
        _tally(simulation.history, counts)
        rebuilt += 1
    assert rebuilt >= 15, f"only {rebuilt} of 20 runs finished"
    special = "elected: unclean" if config.unclean_leader_election_enable else "truncated: high_watermark"
    assert counts[special] > 0, counts


# -- the state at every point of a run ----------------------------------------------------------------------


@pytest.mark.parametrize("seeds", [range(100, 115)], ids=lambda r: f"seeds-{r.start}-{r.stop - 1}")
def test_the_history_so_far_rebuilds_the_state_at_every_point(seeds: range) -> None:
    """Mid-run too, with retention deleting segments and moving log start offsets (and followers behind them starting
    over): a crashed broker's replicas are as it left them, and the next incarnation's LogOpened says what recovery
    kept; an offline replica is as its disk was left."""
    counts: Counter[str] = Counter()
    for seed in seeds:
        simulation = _recorded(seed)
        simulation.total_steps = STEPS
        for step in range(STEPS):
            simulation.step()
            if step % CHECK_EVERY_STEPS == 0:
                _assert_rebuilds(simulation, f"seed {seed} step {step}")
        simulation.heal()
        for _ in range(300):
            simulation.step()
        _assert_rebuilds(simulation, f"seed {seed} healed")
        assert simulation.history is not None
        _tally(simulation.history, counts)
    needed_kinds = ("LogStartOffsetAdvanced", "SegmentRolled", "SegmentDeleted", "truncated: start_over")
    for needed in (*needed_kinds, "recovered with its tail cut"):
        assert counts[needed] > 0, f"no {needed!r} in any run: {counts}"


# -- a topic deleted and created again --------------------------------------------------------------------------


def _step_until(simulation: Simulation, done: Callable[[], bool]) -> None:
    for _ in range(HEALED_STEPS_MAX):
        simulation.step()
        if done():
            return
    raise AssertionError("the cluster did not get there")


def test_a_deleted_topic_leaves_nothing_and_its_successor_starts_over() -> None:
    """Given a converged cluster with one broker down (cleanly), when the topic is deleted, then the live brokers'
    replicas are gone at once and the down broker's when it is back (it reopens them, then deletes them); when the
    topic is created again under its name, its partitions start again at partition epoch 0."""
    simulation = _recorded(7)
    simulation.run(STEPS)
    down = simulation.brokers[2]
    down.crash(lossy=False)
    simulation.restarts.append((simulation.now_ms + 400, down.broker_id))
    deleted_at = len(simulation.history or [])
    simulation.delete_topic()
    for _ in range(5):
        simulation.step()
    state = _assert_rebuilds(simulation, "deleted, broker 2 down")
    assert state.partitions == {}
    assert {key[2] for key in state.replicas} == {2}, "only the down broker still holds the deleted replicas"
    _step_until(simulation, lambda: down.alive and down.registered and not simulation.cores(down))
    state = _assert_rebuilds(simulation, "deleted, broker 2 back")
    assert state.replicas == {}
    simulation.create_topic()
    _step_until(simulation, simulation._converged)
    state = _assert_rebuilds(simulation, "created again")
    assert {key[:2] for key in state.replicas} == set(simulation.histories)
    assert all(p.partition_epoch < 10 for p in state.partitions.values()), state.partitions
    assert simulation.history is not None
    said = [
        (e.type, getattr(e.event, "reason", ""))
        for e in simulation.history[deleted_at:]
        if e.emitter.emitter_id == 2 and isinstance(e.event, events.LogOpened | events.LogDeleted)
    ]
    opened, deleted, created = ("LogOpened", "recovered"), ("LogDeleted", "topic_deleted"), ("LogOpened", "created")
    assert said == [opened, opened, deleted, deleted, created, created]


# -- damaged histories ------------------------------------------------------------------------------------------

_REPLICA_CHANGES = (
    events.LogOpened,
    events.RecordsAppended,
    events.HighWatermarkAdvanced,
    events.LeaderEpochStarted,
    events.LogTruncated,
)


def _final_history(seed: int) -> tuple[Simulation, list[Envelope]]:
    simulation = _recorded(seed)
    simulation.run(STEPS)
    assert simulation.history is not None
    return simulation, simulation.history


def test_dropping_a_replicas_last_change_gives_another_state() -> None:
    """For every replica, the last event that changed it (an append, HW, epoch, truncation or opening) is dropped:
    the rebuilt replica must differ from the live one. (A LogOpened may restate what the replica held before a
    crash that lost nothing: dropping it must then be reported as a gap in its incarnation's sequence.)"""
    kinds: Counter[str] = Counter()
    for seed in range(5):
        simulation, history = _final_history(seed)
        live = simulation.replica_states()
        last: dict[tuple[str, int, int], int] = {}
        for index, envelope in enumerate(history):
            event = envelope.event
            if isinstance(event, _REPLICA_CHANGES):
                last[(event.topic, event.partition, event.replica)] = index
        for key, index in last.items():
            damaged = rebuild(history[:index] + history[index + 1 :])
            differs = damaged.replicas.get(key) != live[key]
            if isinstance(history[index].event, events.LogOpened) and not differs:
                differs = any("events lost" in a.detail for a in damaged.anomalies)
            assert differs, f"seed {seed}: dropping {history[index]} went unseen"
            kinds[history[index].type] += 1
    assert len(kinds) >= 2, kinds  # more than one kind of last change was dropped


def test_dropping_an_event_inside_an_incarnation_is_reported_as_lost() -> None:
    _, history = _final_history(3)
    for index in range(10, len(history), max(len(history) // 40, 1)):
        following = [e for e in history[index + 1 :] if e.emitter == history[index].emitter]
        if not following:
            continue
        damaged = rebuild(history[:index] + history[index + 1 :])
        lost = [a for a in damaged.anomalies if "events lost" in a.detail]
        assert lost and lost[0].emitter == history[index].emitter, f"dropping {history[index]} went unreported"


def test_two_swapped_appends_give_another_state_and_are_reported() -> None:
    """A replica's last two appends exchanged in their emitter's order (their sequence numbers swapped)."""
    simulation, history = _final_history(5)
    live = simulation.replica_states()
    appends: dict[tuple[str, int, int], list[int]] = {}
    for index, envelope in enumerate(history):
        event = envelope.event
        if isinstance(event, events.RecordsAppended):
            appends.setdefault((event.topic, event.partition, event.replica), []).append(index)
    swapped = 0
    for key, indexes in appends.items():
        first, second = indexes[-2:]
        later_changes = [
            e for e in history[second + 1 :] if isinstance(e.event, events.LogOpened | events.LogTruncated)
        ]
        if any(getattr(e.event, "replica", None) == key[2] for e in later_changes):
            continue  # a later opening or truncation sets the LEO anyway
        damaged = list(history)
        damaged[first] = dataclasses.replace(history[first], event=history[second].event)
        damaged[second] = dataclasses.replace(history[second], event=history[first].event)
        state = rebuild(damaged)
        assert state.replicas[key] != live[key]
        assert any("base offset" in a.detail for a in state.anomalies), state.anomalies
        swapped += 1
    assert swapped > 0


def test_dropping_a_partitions_last_change_gives_another_state() -> None:
    simulation, history = _final_history(1)
    live = simulation.partition_states()
    last = {}
    for index, envelope in enumerate(history):
        if isinstance(envelope.event, events.PartitionChanged):
            last[(envelope.event.topic, envelope.event.partition)] = index
    for key, index in last.items():
        damaged = rebuild(history[:index] + history[index + 1 :])
        assert damaged.partitions.get(key) != live[key]
