"""Incremental fetch sessions for follower fetches (KIP-227): Kafka's FetchSession.scala and FetchSessionHandler, pure.

Room: libs/core. The replica manager (`hightide.core.replica_manager`) uses both halves: as a leader, the
`FetchSessionCache` of the sessions its followers opened; as a follower, one `FollowerSession` per leader it
fetches from. It owns the rules of a session, as Kafka's:

- a request carries a session id and epoch. Epoch -1 (FINAL) asks for no session; epoch 0 (INITIAL) is a full fetch
  that closes the session it names, if any, and asks for a new one; a session id with epoch > 0 is an incremental
  fetch, which must carry the epoch the session expects (else INVALID_FETCH_SESSION_EPOCH) of a session the leader
  holds for that very follower (else FETCH_SESSION_ID_NOT_FOUND), and names only the partitions whose fetch state
  changed since the last request (added or altered) and the ones it no longer fetches (`forgotten`). One exception
  to Kafka's rule: a copy of the fetch the session has just served (its epoch again) is read again and answered in
  full, the session unchanged, as a copy of a sessionless fetch was; Kafka answers it INVALID_FETCH_SESSION_EPOCH,
  over TCP, where it cannot arrive. A network that duplicates (the simulator's) would otherwise turn every copy into
  an error answer that, arriving first, sends the follower back to a full fetch;
- the leader reads every partition of the session on each fetch, with the fetch state it cached for the ones not
  named (Kafka's IncrementalFetchContext iterates the cached partitions: the follower's position and its caught-up
  time are updated on every fetch, and a HW that moved is answered whether the fetch named the partition or not);
  beyond Kafka's, a partition not named and unchanged since the session's last read of it at its LEO is answered
  from that read (`CachedPartition.answer`, the replica manager's `_unchanged`), only the follower's state moving,
  and answers only the partitions that have something to say: records, a high watermark or log start offset that
  moved since the last answer (carried by an answer that goes for another reason: records, an error, a divergence
  or the fetch's max wait; a moved HW alone sends no answer to a follower, KAFKA-9952, as in Kafka's DelayedFetch),
  an error (after which the cached HW is -1, so the partition is answered again once the error is gone) or a
  diverging epoch (`CachedPartition.must_respond`); and, beyond Kafka's rule, every
  partition the fetch names. A follower names a partition when its own state moved (an append, a truncation, a new
  log start or epoch), and after a truncation its HW is below the leader's although the leader's has not moved:
  Kafka's follower learns it again only at the leader's next HW move, Hightide's in the answer (so the answers a
  follower applies are the ones it applied without sessions, and the simulated histories are the same but for
  FetchServed). The session keeps the order the follower first named its partitions in, as sessionless fetches
  did (Kafka moves a partition that returned records to the end, so that a response's byte budget goes round the
  partitions; left out, so that the answers a follower applies come in the same order as without sessions);
- a session is created for a follower's full fetch when the cache has a free slot
  (`max.incremental.fetch.session.cache.slots`, Kafka's default 1000; 0 turns sessions off) or when its least
  recently used session has been idle for `min.incremental.fetch.session.eviction.ms` (Kafka's fixed 120 s), which
  it then replaces. Kafka also lets a larger privileged session evict a smaller one; only followers have sessions
  here (a consumer's fetch asking for one is answered without, as Kafka answers when the cache is full), a few per
  broker against 1000 slots, so that case is left out. Session ids count up from 1 on each leader incarnation;
  a session is bound to the follower that opened it, so another broker's id cannot reach it;
- the follower (Kafka's FetchSessionHandler): a full fetch until the leader gives a session id; then incremental
  fetches naming the partitions whose `FetchPartitionRequest` differs from the one the leader holds, and the
  partitions it stopped following as forgotten. A session error, an answer that closed the session, or a fetch
  that got no answer makes the next fetch a full one (closing the old session: its id with epoch 0); a session
  error is no failure of the partitions, so no backoff follows it (Kafka's fetcher retries at once).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from hightide.core.clock import MonoMs
from hightide.core.metadata_image import TopicPartition
from hightide.protocol.errors import ErrorCode
from hightide.protocol.wire import FetchPartitionRequest, FetchPartitionResponse, FetchRequest, TopicPartitionRef

INVALID_SESSION_ID: Final = 0
INITIAL_EPOCH: Final = 0
FINAL_EPOCH: Final = -1
DEFAULT_CACHE_SLOTS: Final = 1000  # max.incremental.fetch.session.cache.slots
EVICTION_MS: Final = 120_000  # Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
_EPOCH_MAX: Final = 2**31 - 1


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch: FINAL stays FINAL; after the largest Int32, 1."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _EPOCH_MAX else epoch + 1


# -- the leader's side ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class CachedPartition:
    """A partition of a session (Kafka's CachedPartition): the follower's last fetch state for it, and the HW and log
    start offset the leader last answered with. Beyond Kafka's: the leader's last read of it in this session (the
    answer, its FetchServed, and the version of the partition it read, `ReplicaManager`'s), so that a fetch that
    does not name it, of a partition that has not changed since, is not read again."""

    request: FetchPartitionRequest
    high_watermark: int = -1
    log_start_offset: int = -1
    answer: FetchPartitionResponse | None = None
    served: object = None  # the FetchServed event of `answer` (None: none)
    version: tuple[int, int] = (-1, -1)

    def must_respond(self, answer: FetchPartitionResponse) -> bool:
        """Kafka's maybeUpdateResponseData: whether the answer goes in the response; the cache follows it."""
        respond = bool(answer.records) or answer.diverging_epoch >= 0
        if self.high_watermark != answer.high_watermark:
            respond, self.high_watermark = True, answer.high_watermark
        if self.log_start_offset != answer.log_start_offset:
            respond, self.log_start_offset = True, answer.log_start_offset
        if answer.error != 0:
            respond, self.high_watermark = True, -1  # answered again once the error is gone
        return respond


@dataclass(slots=True)
class FetchSession:
    """One follower's session on this leader: the partitions it fetches, in order, and the epoch it must send next."""

    session_id: int
    replica_id: int
    epoch: int
    last_used_ms: MonoMs
    partitions: dict[TopicPartition, CachedPartition] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FetchContext:
    """How a fetch is read and answered (Kafka's FetchContext): `request` is what to read (an incremental fetch's
    partitions taken from the session); `session` the session it reads in (None: sessionless); `create` whether the
    answer opens a session (a full fetch asking for one); `error` a session error, answered with no partition;
    `named` the partitions an incremental fetch named."""

    request: FetchRequest
    session: FetchSession | None = None
    create: bool = False
    error: ErrorCode = ErrorCode.NONE
    named: frozenset[TopicPartition] = frozenset()  # an incremental fetch's own partitions: always answered
    duplicate: bool = False  # a copy of the last incremental fetch: answered in full, the session unchanged


class FetchSessionCache:
    """The follower fetch sessions a leader keeps (Kafka's FetchSessionCache, followers only)."""

    def __init__(self, max_slots: int = DEFAULT_CACHE_SLOTS, eviction_ms: int = EVICTION_MS) -> None:
        assert max_slots >= 0 and eviction_ms >= 0
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self.sessions: dict[int, FetchSession] = {}
        self._last_id = INVALID_SESSION_ID

    def context(self, request: FetchRequest, now_ms: MonoMs) -> FetchContext:
        """Kafka's FetchManager.newContext for a fetch of a follower (`replica_id` >= 0) or a consumer."""
        if request.session_epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if request.session_id != INVALID_SESSION_ID:
                self._close(request.session_id, request.replica_id)
            wants = request.session_epoch == INITIAL_EPOCH and request.replica_id >= 0 and self.max_slots > 0
            return FetchContext(request, create=wants)
        session = self.sessions.get(request.session_id)
        if session is None or session.replica_id != request.replica_id:
            return FetchContext(request, error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != request.session_epoch:
            if next_epoch(request.session_epoch) == session.epoch:  # a copy of the fetch the session just served
                whole = request.model_copy(update={"partitions": tuple(c.request for c in session.partitions.values())})
                return FetchContext(whole, session=session, duplicate=True)
            return FetchContext(request, error=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        named = []
        for fetch in request.partitions:
            tp = TopicPartition(fetch.topic, fetch.partition)
            named.append(tp)
            cached = session.partitions.get(tp)
            if cached is None:
                session.partitions[tp] = CachedPartition(fetch)
            else:
                cached.request = fetch
        for gone in request.forgotten:
            session.partitions.pop(TopicPartition(gone.topic, gone.partition), None)
        if not session.partitions:
            del self.sessions[session.session_id]
            return FetchContext(request)
        session.last_used_ms = now_ms
        session.epoch = next_epoch(session.epoch)
        whole = request.model_copy(update={"partitions": tuple(c.request for c in session.partitions.values())})
        return FetchContext(whole, session=session, named=frozenset(named))

    def respond(
        self, context: FetchContext, answers: Sequence[FetchPartitionResponse], now_ms: MonoMs
    ) -> tuple[int, list[bool]]:
        """Kafka's updateAndGenerateResponseData: the session id the answer carries, and for each answer whether it
        goes in the response (every one, but for an incremental fetch's)."""
        session = context.session
        if session is not None and context.duplicate:
            return session.session_id, [True] * len(answers)
        if session is not None:
            included = []
            for answer in answers:
                tp = TopicPartition(answer.topic, answer.partition)
                cached = session.partitions.get(tp)
                included.append(cached is None or cached.must_respond(answer) or tp in context.named)
            return session.session_id, included
        everything = [True] * len(answers)
        if not context.create or not self._make_room(now_ms):
            return INVALID_SESSION_ID, everything
        self._last_id = self._last_id + 1 if self._last_id < _EPOCH_MAX else 1
        while self._last_id in self.sessions or self._last_id == INVALID_SESSION_ID:
            self._last_id = self._last_id + 1 if self._last_id < _EPOCH_MAX else 1
        created = FetchSession(self._last_id, context.request.replica_id, next_epoch(INITIAL_EPOCH), now_ms)
        by_tp = {TopicPartition(f.topic, f.partition): f for f in context.request.partitions}
        for answer in answers:
            tp = TopicPartition(answer.topic, answer.partition)
            cached = CachedPartition(by_tp[tp], answer.high_watermark, answer.log_start_offset)
            if answer.error != 0:
                cached.high_watermark = -1
            created.partitions[tp] = cached
        self.sessions[created.session_id] = created
        return created.session_id, everything

    def _make_room(self, now_ms: MonoMs) -> bool:
        if len(self.sessions) < self.max_slots:
            return True
        if not self.sessions:
            return False
        oldest = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.session_id))
        if now_ms - oldest.last_used_ms < self.eviction_ms:
            return False
        del self.sessions[oldest.session_id]
        return True

    def _close(self, session_id: int, replica_id: int) -> None:
        session = self.sessions.get(session_id)
        if session is not None and session.replica_id == replica_id:
            del self.sessions[session_id]


# -- the follower's side -------------------------------------------------------------------------------------------

FetchState = tuple[int, int, int, int, int]
"""What a partition's fetch says beyond its name (`Partition.fetch_state`): what the leader's session holds of it."""


@dataclass(slots=True)
class FollowerSession:
    """A follower's session with one leader (Kafka's FetchSessionHandler): what the leader holds of each partition,
    and the id and epoch the next fetch carries (epoch 0: a full fetch)."""

    session_id: int = INVALID_SESSION_ID
    epoch: int = INITIAL_EPOCH
    held: dict[TopicPartition, FetchState] = field(default_factory=dict)
    _sending: dict[TopicPartition, FetchState] = field(default_factory=dict)
    _sent_epoch: int = INITIAL_EPOCH

    def build(
        self, wanted: Mapping[TopicPartition, FetchState], fetch: Callable[[TopicPartition], FetchPartitionRequest]
    ) -> tuple[tuple[FetchPartitionRequest, ...], tuple[TopicPartitionRef, ...], int, int]:
        """The next fetch (Kafka's Builder.build) of the partitions `wanted`, each with its fetch state (`fetch` makes
        a partition's request): its partitions, forgotten partitions, session id and epoch. A full fetch names every
        partition; an incremental one those whose state differs from what the leader holds."""
        self._sending, self._sent_epoch = dict(wanted), self.epoch
        if self.session_id == INVALID_SESSION_ID or self.epoch == INITIAL_EPOCH:
            return tuple(fetch(tp) for tp in wanted), (), self.session_id, INITIAL_EPOCH
        changed = tuple(fetch(tp) for tp, state in wanted.items() if self.held.get(tp) != state)
        forgotten = tuple(
            TopicPartitionRef(topic=tp.topic, partition=tp.partition) for tp in self.held if tp not in wanted
        )
        return changed, forgotten, self.session_id, self.epoch

    def on_response(self, error: ErrorCode, session_id: int) -> bool:
        """Kafka's handleResponse for the answer to the last fetch built: whether its partitions are to be applied
        (not after a session error, which makes the next fetch a full one)."""
        if error in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH):
            if error is ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self.session_id = INVALID_SESSION_ID
            self._reset()
            return False
        if error is not ErrorCode.NONE:
            self._reset()
            return True
        if session_id == INVALID_SESSION_ID:  # no session given, or the leader closed it
            self.session_id = INVALID_SESSION_ID
            self._reset()
            return True
        if self._sent_epoch == INITIAL_EPOCH or session_id != self.session_id:
            self.session_id, self.epoch = session_id, next_epoch(INITIAL_EPOCH)
        else:
            self.epoch = next_epoch(self.epoch)
        self.held = self._sending
        return True

    def on_failure(self) -> None:
        """Kafka's handleError: the fetch got no answer; the next one is full and closes the session."""
        self._reset()

    def _reset(self) -> None:
        self.epoch = INITIAL_EPOCH
        self.held = {}


__all__ = [
    "DEFAULT_CACHE_SLOTS",
    "EVICTION_MS",
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "CachedPartition",
    "FetchContext",
    "FetchSession",
    "FetchSessionCache",
    "FetchState",
    "FollowerSession",
    "next_epoch",
]
