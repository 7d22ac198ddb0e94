"""The event catalogue: every state transition of a Hightide cluster, as a past-tense fact.

Room: libs/protocol (vocabulary). The core returns these next to the state change itself (`Emit` effects), so a
transition cannot happen without its event; the shell wraps each in an envelope (cluster, emitter, sequence,
clocks) and stores it. Simulated and real histories share this one schema, and the audit reads it.

Rules for this module:
- One class per event type, named for what happened (`LogTruncated`, never `TruncateLog`).
- `VERSION` starts at 1 and goes up when a field is added, renamed or changes meaning; old versions are upcast
  where events are read (`upcast`, used by the envelope's decoder), never rewritten. A field added in version v
  has a default, and `FIELDS_ADDED[v]` names it: an older event reads as one with that default.
- Every event a controller decides carries `controller_epoch` and `metadata_offset` (its decision's place in the
  metadata log): the events are written before the decision is appended, as its intent, and the history keeps
  only those whose decision committed (`hightide.audit.rebuild`). -1: not known (a version 1 event).
- Every integer field is sized (`Int32`, `Int64`) as Kafka sizes the same quantity; `check_event` enforces it.
- Replica and broker ids are Int32, offsets Int64, epochs Int32, times in ms Int64.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, ClassVar, Final, TypeVar

INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1


@dataclass(frozen=True, slots=True)
class IntRange:
    low: int
    high: int


Int32 = Annotated[int, IntRange(INT32_MIN, INT32_MAX)]
Int64 = Annotated[int, IntRange(INT64_MIN, INT64_MAX)]
BrokerIds = tuple[Int32, ...]
EpochEntries = tuple[tuple[Int32, Int64], ...]  # a leader epoch cache: (epoch, start offset), oldest first


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Base of every event. `TYPE` is the class name, set when the class joins the catalogue."""

    TYPE: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1
    FIELDS_ADDED: ClassVar[Mapping[int, tuple[str, ...]]] = {}
    """The fields each version after the first added (each with a default), by version."""


CATALOGUE: dict[str, type[Event]] = {}
E = TypeVar("E", bound=type[Event])
E2 = TypeVar("E2", bound=Event)

NO_CONTROLLER_EPOCH: Final = -1
NO_METADATA_OFFSET: Final = -1
_STAMP: Final = ("controller_epoch", "metadata_offset")


def catalogued(cls: E) -> E:
    """Add an event class to the catalogue under its class name."""
    assert cls.__name__ not in CATALOGUE, f"duplicate event type {cls.__name__}"
    assert cls.__doc__, f"{cls.__name__} needs a docstring: it is the catalogue's documentation"
    assert sorted(cls.FIELDS_ADDED) == list(range(2, cls.VERSION + 1)), f"{cls.__name__}: one FIELDS_ADDED per version"
    defaults = {f.name for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    added = {name for names in cls.FIELDS_ADDED.values() for name in names}
    assert added <= defaults, f"{cls.__name__}: fields added after version 1 need defaults: {sorted(added - defaults)}"
    cls.TYPE = cls.__name__
    CATALOGUE[cls.__name__] = cls
    return cls


def upcast(event_class: type[Event], version: int, fields: Mapping[str, object]) -> dict[str, object]:
    """An older version's fields as the current version's: each field added since takes its default. A version
    this reader does not know (newer, or below 1) is an InvalidEvent."""
    if not 1 <= version <= event_class.VERSION:
        raise InvalidEvent(f"{event_class.TYPE} version {version!r}: this reader knows 1 to {event_class.VERSION}")
    upcast_fields = dict(fields)
    defaults = {f.name: f.default for f in dataclasses.fields(event_class)}
    for added_in in range(version + 1, event_class.VERSION + 1):
        for name in event_class.FIELDS_ADDED[added_in]:
            upcast_fields.setdefault(name, defaults[name])
    return upcast_fields


def decision_stamp(event: Event) -> tuple[int, int] | None:
    """(controller epoch, metadata offset) of an event a controller decided, or None for any other event."""
    if not all(hasattr(event, name) for name in _STAMP) or isinstance(event, ControllerElected | ControllerDeposed):
        return None
    return getattr(event, "controller_epoch"), getattr(event, "metadata_offset")  # noqa: B009 (not every Event)


def stamped(event: E2, controller_epoch: int, metadata_offset: int) -> E2:
    """The event with its decision's controller epoch and metadata offset (the event as it was, if it is not one
    a controller decides)."""
    if decision_stamp(event) is None:
        return event
    return dataclasses.replace(event, controller_epoch=controller_epoch, metadata_offset=metadata_offset)  # type: ignore[call-arg]


class InvalidEvent(ValueError):
    """An event whose fields do not fit the catalogue's sizes and types."""


def check_event(event: Event) -> None:
    """Check every field against its declared type and size (the store does this before accepting one).

    Each field's value first meets its hint's quick test (`_quick_test`: exact built-in types, ranges, tuples of
    them), which only ever passes what the full check passes; anything it does not pass, the full check judges
    (and words the error). A reader of the event store checks every event it reads this way (issue 15: the
    archiver's check of each event was a sixth of its CPU)."""
    for name, quick, hint in _field_tests(type(event)):
        value = getattr(event, name)
        if quick is None or not quick(value):
            _check_value(type(event).__name__, name, hint, value)


def field_hints(event_class: type[Event]) -> dict[str, object]:
    """Each field's declared type (with its size annotation), in field order; resolved once per class."""
    hints = _FIELD_HINTS.get(event_class)
    if hints is None:
        resolved = typing.get_type_hints(event_class, include_extras=True)
        hints = {field.name: resolved[field.name] for field in dataclasses.fields(event_class)}
        _FIELD_HINTS[event_class] = hints
    return hints


_FIELD_HINTS: dict[type[Event], dict[str, object]] = {}

Quick = typing.Callable[[object], bool]


def _field_tests(event_class: type[Event]) -> tuple[tuple[str, Quick | None, object], ...]:
    """(name, quick test or None, hint) of each field; built once per class."""
    tests = _FIELD_TESTS.get(event_class)
    if tests is None:
        tests = tuple((name, _quick_test(hint), hint) for name, hint in field_hints(event_class).items())
        _FIELD_TESTS[event_class] = tests
    return tests


_FIELD_TESTS: dict[type[Event], tuple[tuple[str, Quick | None, object], ...]] = {}


def _quick_test(hint: object) -> Quick | None:
    """A test that passes only values `_check_value` accepts for `hint` (exact types: a subclass of int or str is
    left to the full check), or None where the hint has no such test."""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        base, *metadata = typing.get_args(hint)
        ranges = [meta for meta in metadata if isinstance(meta, IntRange)]
        if base is int and len(ranges) == 1 and len(metadata) == 1:
            low, high = ranges[0].low, ranges[0].high
            return lambda value: value.__class__ is int and low <= value <= high
        return None
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            item = _quick_test(args[0])
            if item is None:
                return None
            return lambda value: value.__class__ is tuple and all(map(item, value))
        tests = [_quick_test(arg) for arg in args]
        if any(test is None for test in tests):
            return None
        known = typing.cast(list[Quick], tests)
        return lambda value: (
            value.__class__ is tuple
            and len(value) == len(known)
            and all(test(element) for test, element in zip(known, value, strict=True))
        )
    if origin in (typing.Union, types.UnionType):
        options = [_quick_test(option) for option in typing.get_args(hint)]
        if any(option is None for option in options):
            return None
        known_options = typing.cast(list[Quick], options)
        return lambda value: any(option(value) for option in known_options)
    if hint is type(None):
        return lambda value: value is None
    if hint is bool:
        return lambda value: value is True or value is False
    if hint in (int, str, float, bytes):
        exact = typing.cast(type, hint)
        return lambda value: value.__class__ is exact
    return None


def _check_value(event_type: str, name: str, hint: object, value: object) -> None:
    origin = typing.get_origin(hint)
    if origin is Annotated:
        base, *metadata = typing.get_args(hint)
        _check_value(event_type, name, base, value)
        for meta in metadata:
            if isinstance(meta, IntRange) and not meta.low <= typing.cast(int, value) <= meta.high:
                raise InvalidEvent(f"{event_type}.{name}={value!r} is outside [{meta.low}, {meta.high}]")
        return
    if origin is tuple:
        args = typing.get_args(hint)
        if not isinstance(value, tuple):
            raise InvalidEvent(f"{event_type}.{name} must be a tuple, not {type(value).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:  # tuple[X, ...]: any number of X
            items = [args[0]] * len(value)
        elif len(value) != len(args):  # tuple[X, Y]: exactly one X then one Y
            raise InvalidEvent(f"{event_type}.{name}={value!r} must have {len(args)} items")
        else:
            items = list(args)
        for item, element in zip(items, value, strict=True):
            _check_value(event_type, name, item, element)
        return
    if origin in (typing.Union, types.UnionType):
        if not any(_fits(option, value) for option in typing.get_args(hint)):
            raise InvalidEvent(f"{event_type}.{name}={value!r} does not fit {hint}")
        return
    if hint is type(None):
        if value is not None:
            raise InvalidEvent(f"{event_type}.{name} must be None")
        return
    assert isinstance(hint, type), hint
    if not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
        raise InvalidEvent(f"{event_type}.{name} must be {hint.__name__}, not {type(value).__name__}")


def _fits(hint: object, value: object) -> bool:
    try:
        _check_value("", "", hint, value)
    except InvalidEvent:
        return False
    return True


# -- the log of one replica -------------------------------------------------------------------------------------


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class RecordsAppended(Event):
    """A replica appended batches to its log (as leader from a producer, or as follower from its leader)."""

    topic: str
    partition: Int32
    replica: Int32
    leader_epoch: Int32
    base_offset: Int64
    last_offset: Int64
    record_count: Int32
    size_bytes: Int32
    log_end_offset: Int64
    as_leader: bool


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class LogTruncated(Event):
    """A replica removed the suffix of its log from `truncated_to` (its LEO before was `log_end_offset_before`).
    `reason`: divergence (leader epochs), high_watermark (the legacy pre-KIP-101 rule), offset_out_of_range,
    or start_over (truncated fully and restarted at `truncated_to`). If `truncated_to` is below
    `high_watermark_before`, records this replica held as committed were removed. The log start offset becomes
    min(itself, `truncated_to`) and the leader epoch entries starting at or after `truncated_to` go (start_over:
    the log starts at `truncated_to` with no entries)."""

    topic: str
    partition: Int32
    replica: Int32
    log_end_offset_before: Int64
    truncated_to: Int64
    high_watermark_before: Int64
    high_watermark: Int64
    leader_epoch: Int32
    reason: str


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class HighWatermarkAdvanced(Event):
    """A replica's high watermark moved up: on the leader by the ISR's LEOs, on a follower from a fetch."""

    topic: str
    partition: Int32
    replica: Int32
    leader_epoch: Int32
    previous: Int64
    high_watermark: Int64


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderEpochStarted(Event):
    """A replica's leader epoch cache gained (epoch, start offset): the first offset written in that epoch."""

    topic: str
    partition: Int32
    replica: Int32
    leader_epoch: Int32
    start_offset: Int64


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class LogStartOffsetAdvanced(Event):
    """A replica's log start offset (low watermark) moved up to `log_start_offset`: `reason` retention (segments
    were deleted), delete_records, or leader (its leader's moved). Its leader epoch entries are cut there (Kafka's
    truncateFromStart)."""

    topic: str
    partition: Int32
    replica: Int32
    log_start_offset: Int64
    reason: str


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderEpochsTruncated(Event):
    """A replica dropped every leader epoch entry starting at or after `end_offset` while its log stayed as it was
    (Kafka's truncateTo at or past the LEO): an epoch it led at `end_offset` without writing in it. A truncation
    that removes records says the same in its LogTruncated."""

    topic: str
    partition: Int32
    replica: Int32
    end_offset: Int64


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class LogOpened(Event):
    """A broker opened a replica's log and now holds exactly this state: `reason` created (a new, empty log),
    clean_shutdown (loaded as a clean shutdown left it) or recovered (after an unclean one: recovery may have cut
    a torn tail, the HW is the checkpointed one clamped into [log start, LEO], and the epoch entries are the
    checkpointed ones cut at the LEO and the log start). What earlier events said of this replica is replaced."""

    topic: str
    partition: Int32
    replica: Int32
    log_start_offset: Int64
    log_end_offset: Int64
    high_watermark: Int64
    leader_epochs: EpochEntries
    reason: str


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class LogDeleted(Event):
    """A broker deleted its replica of a partition, log and all: `reason` topic_deleted (the partition is gone
    from the metadata), not_a_replica (the partition's replicas no longer include this broker) or
    topic_id_changed (the log belonged to an earlier topic of the same name)."""

    topic: str
    partition: Int32
    replica: Int32
    log_end_offset: Int64
    reason: str


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaOffline(Event):
    """A broker's storage refused a change to its replica's log (a full or failing disk, an append it must not
    make): the replica went offline on that broker, as Kafka takes a failed log directory offline. It serves
    nothing and follows nothing until the broker restarts and recovers the log; the broker reports it to the
    controller, which moves leadership and takes it out of the ISR. `log_end_offset` is the log's end as the
    replica last knew it to be on disk; `error` is a Kafka error name and `detail` what storage said."""

    topic: str
    partition: Int32
    replica: Int32
    log_end_offset: Int64
    error: str
    detail: str


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class FetchResponseRejected(Event):
    """A follower did not apply its leader's answer for a partition: the records were not whole, intact batches
    in offset order (`error` a Kafka error name, `detail` the first problem). It fetches again after the backoff."""

    topic: str
    partition: Int32
    replica: Int32
    leader: Int32
    fetch_offset: Int64
    error: str
    detail: str


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentRolled(Event):
    """A replica's log started a new active segment at `base_offset`: `reason` append (the active one was full
    or old), retention (every segment was deleted) or truncation (the log was emptied and restarted there)."""

    topic: str
    partition: Int32
    replica: Int32
    base_offset: Int64
    reason: str


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentDeleted(Event):
    """A replica deleted a segment holding offsets [`base_offset`, `next_offset`): `reason` retention_ms,
    retention_bytes, log_start_offset (wholly below the log start offset) or truncation."""

    topic: str
    partition: Int32
    replica: Int32
    base_offset: Int64
    next_offset: Int64
    size_bytes: Int64
    reason: str


# -- leadership of a partition, as a broker sees it ------------------------------------------------------------


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class BecameLeader(Event):
    """A broker started leading a partition in `leader_epoch` with LEO `log_end_offset` (the epoch's start)."""

    topic: str
    partition: Int32
    replica: Int32
    leader_epoch: Int32
    partition_epoch: Int32
    replicas: BrokerIds
    isr: BrokerIds
    log_end_offset: Int64
    high_watermark: Int64


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class BecameFollower(Event):
    """A broker started following `leader` (-1: none) in `leader_epoch`."""

    topic: str
    partition: Int32
    replica: Int32
    leader: Int32
    leader_epoch: Int32
    partition_epoch: Int32
    log_end_offset: Int64
    high_watermark: Int64


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class FetchServed(Event):
    """A leader answered a fetch: `replica` is the follower's id (-1 for a consumer). `diverging_epoch` and
    `diverging_end_offset` are -1 unless the follower's log diverged; `error` is a Kafka error name. One per
    partition the answer carries: in a follower's incremental fetch session (KIP-227) the leader reads every
    partition of the session but answers only those with records, a moved high watermark or log start offset, an
    error or a divergence, so a partition the follower has caught up on is announced once, not on every fetch."""

    topic: str
    partition: Int32
    leader: Int32
    replica: Int32
    leader_epoch: Int32
    fetch_offset: Int64
    last_fetched_epoch: Int32
    records_end_offset: Int64
    high_watermark: Int64
    log_end_offset: Int64
    diverging_epoch: Int32
    diverging_end_offset: Int64
    error: str


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class FollowerStateUpdated(Event):
    """The leader's view of a follower changed: its LEO, and the last time it was caught up."""

    topic: str
    partition: Int32
    leader: Int32
    replica: Int32
    log_end_offset: Int64
    last_caught_up_time_ms: Int64


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class IsrChangeProposed(Event):
    """A leader asked the controller to change the ISR (AlterPartition): `change` is shrink or expand."""

    topic: str
    partition: Int32
    leader: Int32
    leader_epoch: Int32
    partition_epoch: Int32
    isr: BrokerIds
    proposed_isr: BrokerIds
    change: str


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class IsrChangeCompleted(Event):
    """A leader learned the controller's answer to its proposal, from the answer or from the metadata log:
    committed (`error` NONE) or not. `change` is the proposal's, shrink or expand (empty in a version 1 event):
    the committed ones are Kafka's IsrShrinksPerSec and IsrExpandsPerSec."""

    VERSION: ClassVar[int] = 2
    FIELDS_ADDED: ClassVar[Mapping[int, tuple[str, ...]]] = {2: ("change",)}

    topic: str
    partition: Int32
    leader: Int32
    leader_epoch: Int32
    partition_epoch: Int32
    isr: BrokerIds
    error: str
    change: str = ""


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceCompleted(Event):
    """A leader answered a produce: `error` NONE means acknowledged at `acks` (-1 = all)."""

    topic: str
    partition: Int32
    leader: Int32
    leader_epoch: Int32
    acks: Int32
    base_offset: Int64
    last_offset: Int64
    high_watermark: Int64
    error: str


# -- the controller's metadata -----------------------------------------------------------------------------------


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerRegistered(Event):
    """A broker registered (or re-registered) with a new broker epoch; `previous_broker_epoch` is the epoch its
    clean-shutdown marker recorded (-1 after an unclean shutdown). Its replicas marked offline are online again."""

    VERSION: ClassVar[int] = 2
    FIELDS_ADDED: ClassVar[Mapping[int, tuple[str, ...]]] = {2: ("controller_epoch", "metadata_offset")}

    broker: Int32
    broker_epoch: Int64
    previous_broker_epoch: Int64
    fenced: bool
    controller_epoch: Int32 = NO_CONTROLLER_EPOCH
    metadata_offset: Int64 = NO_METADATA_OFFSET


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerFenced(Event):
    """The controller fenced a broker: `reason` is session_timeout, controlled_shutdown or unregistered."""

    VERSION: ClassVar[int] = 2
    FIELDS_ADDED: ClassVar[Mapping[int, tuple[str, ...]]] = {2: ("controller_epoch", "metadata_offset")}

    broker: Int32
    broker_epoch: Int64
    reason: str
    controller_epoch: Int32 = NO_CONTROLLER_EPOCH
    metadata_offset: Int64 = NO_METADATA_OFFSET


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerUnfenced(Event):
    """The controller unfenced a broker: it may lead and join ISRs again."""

    VERSION: ClassVar[int] = 2
    FIELDS_ADDED: ClassVar[Mapping[int, tuple[str, ...]]] = {2: ("controller_epoch", "metadata_offset")}

    broker: Int32
    broker_epoch: Int64
    controller_epoch: Int32 = NO_CONTROLLER_EPOCH
    metadata_offset: Int64 = NO_METADATA_OFFSET


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class ControlledShutdownStarted(Event):
    """A broker asked to shut down; the controller moves its leaderships away before fencing it."""

    VERSION: ClassVar[int] = 2
    FIELDS_ADDED: ClassVar[Mapping[int, tuple[str, ...]]] = {2: ("controller_epoch", "metadata_offset")}

    broker: Int32
    broker_epoch: Int64
    controller_epoch: Int32 = NO_CONTROLLER_EPOCH
    metadata_offset: Int64 = NO_METADATA_OFFSET


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaMarkedOffline(Event):
    """The controller recorded that a broker's replica is offline: its storage refused an append or a truncation
    (Kafka's offline log directory, KIP-858). It leaves the ISR and ELR (a PartitionChanged with reason
    replica_offline follows, and a LeaderElected if it led) and may not lead or rejoin until its broker registers
    again: a BrokerRegistered of that broker brings every replica of the broker back."""

    topic: str
    partition: Int32
    replica: Int32
    broker_epoch: Int64
    controller_epoch: Int32 = NO_CONTROLLER_EPOCH
    metadata_offset: Int64 = NO_METADATA_OFFSET


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class TopicCreated(Event):
    """A topic came into being with its partitions' replica assignment."""

    VERSION: ClassVar[int] = 2
    FIELDS_ADDED: ClassVar[Mapping[int, tuple[str, ...]]] = {2: ("controller_epoch", "metadata_offset")}

    topic: str
    topic_id: str
    partitions: Int32
    replication_factor: Int32
    configs: tuple[tuple[str, str], ...]
    controller_epoch: Int32 = NO_CONTROLLER_EPOCH
    metadata_offset: Int64 = NO_METADATA_OFFSET


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class TopicConfigsAltered(Event):
    """Configs of a topic were set or removed (Kafka's IncrementalAlterConfigs): `configs` holds each changed name
    with its new value, or None where the config was removed and the broker default applies again."""

    VERSION: ClassVar[int] = 2
    FIELDS_ADDED: ClassVar[Mapping[int, tuple[str, ...]]] = {2: ("controller_epoch", "metadata_offset")}

    topic: str
    configs: tuple[tuple[str, str | None], ...]
    controller_epoch: Int32 = NO_CONTROLLER_EPOCH
    metadata_offset: Int64 = NO_METADATA_OFFSET


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class TopicDeleted(Event):
    """A topic and all its partitions were removed from the metadata."""

    VERSION: ClassVar[int] = 2
    FIELDS_ADDED: ClassVar[Mapping[int, tuple[str, ...]]] = {2: ("controller_epoch", "metadata_offset")}

    topic: str
    topic_id: str
    controller_epoch: Int32 = NO_CONTROLLER_EPOCH
    metadata_offset: Int64 = NO_METADATA_OFFSET


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionChanged(Event):
    """The controller committed a partition's new state (every change bumps `partition_epoch`). `reason`:
    created, isr_shrink, isr_expand, election, controlled_shutdown, broker_fenced, broker_unfenced,
    broker_restarted, unclean_shutdown, broker_unregistered, replica_offline, reassignment, log_dir_replaced."""

    VERSION: ClassVar[int] = 2
    FIELDS_ADDED: ClassVar[Mapping[int, tuple[str, ...]]] = {2: ("controller_epoch", "metadata_offset")}

    topic: str
    partition: Int32
    replicas: BrokerIds
    isr: BrokerIds
    elr: BrokerIds
    last_known_elr: BrokerIds
    leader: Int32
    leader_epoch: Int32
    partition_epoch: Int32
    reason: str
    controller_epoch: Int32 = NO_CONTROLLER_EPOCH
    metadata_offset: Int64 = NO_METADATA_OFFSET


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderElected(Event):
    """The controller chose a new leader (-1: none could be chosen). `election`: clean (from the ISR), elr,
    unclean, last_known_leader (KIP-966's balanced recovery: ISR and ELR empty, the last leader returns; Kafka
    counts it unclean), preferred, controlled_shutdown, or reassignment (a reassignment that completed or was
    cancelled took the leader out of the replicas; the new one is from the ISR that change left)."""

    VERSION: ClassVar[int] = 2
    FIELDS_ADDED: ClassVar[Mapping[int, tuple[str, ...]]] = {2: ("controller_epoch", "metadata_offset")}

    topic: str
    partition: Int32
    previous_leader: Int32
    leader: Int32
    leader_epoch: Int32
    election: str
    controller_epoch: Int32 = NO_CONTROLLER_EPOCH
    metadata_offset: Int64 = NO_METADATA_OFFSET


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerElected(Event):
    """A controller won the lease and fenced its predecessors with a higher controller epoch. `metadata_offset` is
    where its takeover batch landed in the metadata log: the log's end offset when it took over (KRaft's leader
    writes a LeaderChange record first for the same reason). A decision of an earlier controller epoch at that
    offset or after it never committed. `min_insync_replicas` is the controller's own `min.insync.replicas`, which
    every topic that does not set it gets in its partition records (-1 where an event from before version 3 does not
    say), so the audit can hold HW advances to the cluster's default and not only to topic overrides."""

    VERSION: ClassVar[int] = 3
    FIELDS_ADDED: ClassVar[Mapping[int, tuple[str, ...]]] = {2: ("metadata_offset",), 3: ("min_insync_replicas",)}

    controller: Int32
    controller_epoch: Int32
    metadata_offset: Int64 = NO_METADATA_OFFSET
    min_insync_replicas: Int32 = -1


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerDeposed(Event):
    """A controller stepped down and stands by: `reason` lease_lost (another holds the lease, or it lapsed on the
    local clock), append_fenced (the metadata log moved on without it), append_failed (the outcome of its last
    append is unknown), nats_error, or shutdown. `metadata_offset` is the last metadata log offset it knows
    committed."""

    controller: Int32
    controller_epoch: Int32
    reason: str
    metadata_offset: Int64 = NO_METADATA_OFFSET


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerIdsAllocated(Event):
    """The controller handed out producer ids `first_producer_id` .. `next_producer_id - 1` (InitProducerId)."""

    VERSION: ClassVar[int] = 2
    FIELDS_ADDED: ClassVar[Mapping[int, tuple[str, ...]]] = {2: ("controller_epoch", "metadata_offset")}

    first_producer_id: Int64
    next_producer_id: Int64
    controller_epoch: Int32 = NO_CONTROLLER_EPOCH
    metadata_offset: Int64 = NO_METADATA_OFFSET


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartitionAnswered(Event):
    """The controller answered a leader's AlterPartition (error NONE: the ISR change was committed)."""

    VERSION: ClassVar[int] = 2
    FIELDS_ADDED: ClassVar[Mapping[int, tuple[str, ...]]] = {2: ("controller_epoch", "metadata_offset")}

    topic: str
    partition: Int32
    leader: Int32
    leader_epoch: Int32
    partition_epoch: Int32
    proposed_isr: BrokerIds
    error: str
    controller_epoch: Int32 = NO_CONTROLLER_EPOCH
    metadata_offset: Int64 = NO_METADATA_OFFSET


# -- the clients' own view: what they asked for and what they were told (Jepsen's invoke / ok / fail / info) --------


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class SendInvoked(Event):
    """A client handed a record to its producer for `partition`. `value` names the record (a verifiable
    producer's values are unique), so the audit can follow it to its outcome and into the log."""

    topic: str
    partition: Int32
    key: str | None
    value: str


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class SendCompleted(Event):
    """The producer told the client a send's outcome: `ok` (acknowledged at `offset`; the record must be in the
    log there), `failed` (a definite error: it was never appended) or `unknown` (a timeout or a lost connection
    on some attempt: it may or may not be in the log). `error` is the last failure's Kafka error name (NONE when
    ok); `offset` is -1 unless ok."""

    topic: str
    partition: Int32
    value: str
    outcome: str
    offset: Int64
    error: str


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class RecordsConsumed(Event):
    """A consumer's poll handed the client these records of one partition, in order: each offset with its value.
    Across a consumer's events a partition's offsets only go up, with no record twice and none skipped."""

    topic: str
    partition: Int32
    offsets: tuple[Int64, ...]
    values: tuple[str, ...]


# -- log compaction (issue 13): a replica's log cleaner ----------------------------------------------------------


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class LogCompacted(Event):
    """A replica's log cleaner compacted its log (cleanup.policy=compact): it built the key map over the dirty
    offsets [`first_dirty_offset`, `cleaned_up_to`) and rewrote every segment below `cleaned_up_to`, keeping each
    key's latest record. Offsets do not change; `records_removed` counts superseded and keyless records and
    tombstones past their delete horizon (`tombstones_removed` of them). Each replica cleans its own log."""

    topic: str
    partition: Int32
    replica: Int32
    first_dirty_offset: Int64
    cleaned_up_to: Int64
    segments_before: Int32
    segments_after: Int32
    bytes_before: Int64
    bytes_after: Int64
    records_removed: Int64
    tombstones_removed: Int64


# -- partition reassignment (issue 13): the controller's KIP-455 decisions -------------------------------------------


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionReassignmentStarted(Event):
    """An admin asked to move a partition to `target_replicas` (AlterPartitionReassignments) and the controller
    accepted it: `replicas` is now the target followed by `removing_replicas`; `adding_replicas` join as followers
    and the reassignment completes once every target replica is in the ISR. `original_replicas` is what a
    cancellation restores. A target the ISR already covers completes in the same decision
    (PartitionReassignmentCompleted follows at once)."""

    topic: str
    partition: Int32
    original_replicas: BrokerIds
    target_replicas: BrokerIds
    adding_replicas: BrokerIds
    removing_replicas: BrokerIds
    controller_epoch: Int32 = NO_CONTROLLER_EPOCH
    metadata_offset: Int64 = NO_METADATA_OFFSET


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionReassignmentCompleted(Event):
    """A partition's reassignment completed: every target replica was in the ISR, so the replicas became
    `replicas` (the target), the removed ones left the replicas and ISR, and a removed leader was replaced (a
    LeaderElected with election `reassignment` says by whom)."""

    topic: str
    partition: Int32
    replicas: BrokerIds
    removed_replicas: BrokerIds
    leader: Int32
    leader_epoch: Int32
    controller_epoch: Int32 = NO_CONTROLLER_EPOCH
    metadata_offset: Int64 = NO_METADATA_OFFSET


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionReassignmentCancelled(Event):
    """An admin cancelled a partition's reassignment (a null target, Kafka's PartitionReassignmentRevert): the
    replicas went back to `replicas` (the original ones) and the replicas being added, `dropped_replicas`, left
    the replicas and ISR."""

    topic: str
    partition: Int32
    replicas: BrokerIds
    dropped_replicas: BrokerIds
    leader: Int32
    leader_epoch: Int32
    controller_epoch: Int32 = NO_CONTROLLER_EPOCH
    metadata_offset: Int64 = NO_METADATA_OFFSET


# -- issue 13, the canary client service: its periodic summary ------------------------------------------------------


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class CanarySummary(Event):
    """The canary (`hightide canary`, like Xinfra Monitor) summed up its checks so far, once per summary interval
    and when it stops: records sent to its monitor `topic` (`records_produced`), acknowledged, failed
    (`produce_errors`), read back (`records_consumed`), and of those read, how many acknowledged records it saw
    passed over (`records_lost`), read twice (`records_duplicated`) or out of order (`records_reordered`); the
    99th percentile end-to-end delay of its recent reads (-1 before any). Its records' own SendInvoked,
    SendCompleted and RecordsConsumed events carry the detail the audit checks."""

    topic: str
    partitions: Int32
    records_produced: Int64
    records_acknowledged: Int64
    produce_errors: Int64
    records_consumed: Int64
    records_lost: Int64
    records_duplicated: Int64
    records_reordered: Int64
    delay_ms_p99: Int64


# -- consumer groups (issue 13: the group coordinator on the broker leading the group's offsets partition) ----------
# Assignments and commits are parallel tuples (one row per partition) so that every field is one Spark array type.


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class MemberJoined(Event):
    """A member joined the group (a new member, or a static member taking over its instance id's place), during
    generation `generation_id` (the next rebalance gives it its first assignment). `protocols`: the assignors it
    supports, most preferred first."""

    group_id: str
    member_id: str
    group_instance_id: str | None
    generation_id: Int32
    protocols: tuple[str, ...]


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class GroupRebalanceStarted(Event):
    """The group went to PreparingRebalance from generation `generation_id`: every member must rejoin. `reason`
    names why (a member joined, left, expired, changed its protocols, the leader rejoined)."""

    group_id: str
    generation_id: Int32
    reason: str


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class GroupGenerationStarted(Event):
    """The join phase ended: generation `generation_id` began with these members (none: the group is Empty),
    `leader` chooses the assignment with `protocol`. Generations of a group only go up."""

    group_id: str
    generation_id: Int32
    protocol_type: str
    protocol: str | None
    leader: str | None
    members: tuple[str, ...]


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class GroupAssignmentSynced(Event):
    """The leader's assignment for generation `generation_id` was persisted and handed to the members: member
    `members[i]` owns `topics[i]` partition `partitions[i]` (decoded for protocol type "consumer"; empty for
    other protocol types). No partition has two owners in one generation."""

    group_id: str
    generation_id: Int32
    members: tuple[str, ...]
    topics: tuple[str, ...]
    partitions: tuple[Int32, ...]


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class MemberLeft(Event):
    """A member left the group in generation `generation_id`: `reason` left (LeaveGroup), session_timeout (no
    heartbeat within its session timeout), rebalance_timeout (did not rejoin in time) or replaced (a static
    member's instance id was taken over by a new member id, which fences this one)."""

    group_id: str
    member_id: str
    group_instance_id: str | None
    generation_id: Int32
    reason: str


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetsCommitted(Event):
    """Committed offsets were persisted in `__consumer_offsets` (acks=all) and the commit was answered: for
    `topics[i]` partition `partitions[i]` the group resumes at `offsets[i]`. `generation_id` -1 with member ""
    is a commit outside group management (a simple consumer's, in an Empty group)."""

    group_id: str
    generation_id: Int32
    member_id: str
    topics: tuple[str, ...]
    partitions: tuple[Int32, ...]
    offsets: tuple[Int64, ...]


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class GroupLoaded(Event):
    """This broker became the group's coordinator and rebuilt it from `__consumer_offsets` partition
    `partition`: in `state` at generation `generation_id` with these members and `offsets_count` committed
    offsets."""

    group_id: str
    partition: Int32
    generation_id: Int32
    state: str
    members: tuple[str, ...]
    offsets_count: Int32


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class GroupUnloaded(Event):
    """This broker stopped leading the group's offsets partition and dropped the group (another coordinator
    loads it from the log)."""

    group_id: str
    partition: Int32
    generation_id: Int32


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class GroupDeleted(Event):
    """An Empty group was deleted (DeleteGroups): its metadata and every committed offset got tombstones."""

    group_id: str
    partition: Int32
    generation_id: Int32


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionsAssigned(Event):
    """A group consumer (the client's view) started reading its assignment of generation `generation_id`: for
    `topics[i]` partition `partitions[i]` the group's committed offset was `committed[i]` (-1: none) and it reads
    from `offsets[i]` (the committed offset, else where `auto.offset.reset` put it). A new owner resumes exactly at
    the last commit: nothing skipped, nothing before it read again."""

    group_id: str
    member_id: str
    generation_id: Int32
    topics: tuple[str, ...]
    partitions: tuple[Int32, ...]
    committed: tuple[Int64, ...]
    offsets: tuple[Int64, ...]


# -- issue 15, the Kafka listener's refusals ---------------------------------------------------------------------


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaConnectionRefused(Event):
    """A broker's Kafka listener closed a connection without answering, as Kafka does: `reason` is
    "unknown_api" (an API key Kafka does not serve here), "unparsable" (a header or body that does not parse),
    "oversized" (a frame size over socket.request.max.bytes, or negative) or "no_schema" (a version of a served API
    for which no response can be written). `peer` is the client's address, `api_key`/`api_version` the header's
    (-1: not read)."""

    broker_id: Int32
    peer: str
    reason: str
    api_key: Int32 = -1
    api_version: Int32 = -1


# -- a replaced log directory (issue 13, branch i13-elr) -------------------------------------------------------


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class LogDirReplaced(Event):
    """A broker registered with a log directory other than the one its previous registration named (KIP-858's
    `directory.id` in meta.properties): its disk was wiped or replaced, so its replicas hold nothing of what they
    held, however cleanly it seems to have stopped. It leaves every ISR, ELR and last known ELR (PartitionChanged
    reason log_dir_replaced) and may lead again only once a leader's AlterPartition brings it back in sync."""

    broker: Int32
    broker_epoch: Int64
    previous_directory_id: str
    directory_id: str
    controller_epoch: Int32 = NO_CONTROLLER_EPOCH
    metadata_offset: Int64 = NO_METADATA_OFFSET


# -- a storage refusal as it happens (issue 12: the audit sees a replica that kept serving) --------------------------


@catalogued
@dataclass(frozen=True, slots=True, kw_only=True)
class StorageRefused(Event):
    """A broker's storage refused `operation` (the storage effect's name: AppendAsLeader, AppendAsFollower,
    Truncate, CheckpointHighWatermarks, ...) on this replica's log; `error` is a Kafka error name and `detail` what
    storage said. Emitted when the refusal happens, before the broker decides what follows (a refused checkpoint of
    every log: one for each replica it hosts). What must follow is ReplicaOffline: until it, the replica may serve
    nothing (`storage_refusal_takes_replica_offline`)."""

    topic: str
    partition: Int32
    replica: Int32
    operation: str
    error: str
    detail: str
