"""Where a follower's log must be cut, and what the leader tells it: KIP-101, KIP-279, KIP-320 and Fetch v12.

Room: libs/core (rules as pure functions). Owns the decisions, as values: the leader's answer to
OffsetsForLeaderEpoch, the leader's divergence check on a Fetch carrying `LastFetchedEpoch`, and the follower's
truncation point given the leader's `(epoch, end offset)`. It never truncates anything: the replica layer applies
a `TruncationDecision` to the log (which then calls `LeaderEpochCache.truncate_from_end`).

Follower side, Kafka's `AbstractFetcherThread.getOffsetTruncationState`, with f = the follower's own
`end_offset_for(leader.epoch, LEO)`:

| leader's (epoch, end_offset) | f, the follower's own answer | truncate to                        | completed |
| ---------------------------- | ---------------------------- | ---------------------------------- | --------- |
| end_offset == -1             | -                            | the follower's high watermark      | yes       |
| epoch == -1 (pre-2.0 leader) | -                            | min(end_offset, LEO)               | yes       |
| epoch e                      | undefined (nothing at/below) | min(end_offset, LEO)               | yes       |
| epoch e                      | an epoch other than e        | min(f.end_offset, LEO)             | no        |
| epoch e                      | epoch e                      | min(f.end_offset, end_offset, LEO) | yes       |

"No" means: cut, then ask again about f's epoch (KIP-279); with truncation on fetch, fetch again with the new
latest epoch as `last_fetched_epoch`.

There is deliberately no "never below the high watermark" assertion here: in the KIP-101 scenario where every
replica crashes and the one that comes back first lost an acknowledged tail (flushes are asynchronous), the
follower must cut below its own high watermark or the logs diverge; Kafka's `UnifiedLog.truncateTo` lowers the
high watermark in that case too.
"""

from __future__ import annotations

from typing import NamedTuple

from hightide.core.epoch_cache import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_END_OFFSET,
    UNDEFINED_EPOCH_OFFSET,
    EpochEndOffset,
    LeaderEpochCache,
)
from hightide.protocol.errors import ErrorCode


class TruncationDecision(NamedTuple):
    """Kafka's OffsetTruncationState: cut the log to `truncate_to`; `completed` False means ask the leader again."""

    truncate_to: int
    completed: bool


class DivergenceCheck(NamedTuple):
    """The leader's verdict on one partition of a Fetch: an error, a diverging epoch to report, or neither.

    `diverging` is the FetchResponse `DivergingEpoch` (set only with error NONE); the leader then returns no
    records for the partition.
    """

    diverging: EpochEndOffset | None
    error: ErrorCode


def check_current_leader_epoch(current_leader_epoch: int, leader_epoch: int) -> ErrorCode:
    """Kafka's `Partition.checkCurrentLeaderEpoch`: is the requester's view of the leader epoch ours?

    -1 (the request did not say) is never fenced. A requester behind us is FENCED_LEADER_EPOCH (it must refresh
    its metadata); one ahead of us is UNKNOWN_LEADER_EPOCH (we have not heard of the new epoch yet: retriable).
    """
    if current_leader_epoch == UNDEFINED_EPOCH:
        return ErrorCode.NONE
    if current_leader_epoch < leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if current_leader_epoch > leader_epoch:
        return ErrorCode.UNKNOWN_LEADER_EPOCH
    return ErrorCode.NONE


def offsets_for_leader_epoch(
    leader_cache: LeaderEpochCache,
    leader_log_end_offset: int,
    leader_epoch: int,
    current_leader_epoch: int,
    requested_epoch: int,
) -> tuple[ErrorCode, EpochEndOffset]:
    """The leader's answer to OffsetsForLeaderEpoch for one partition (`Partition.lastOffsetForLeaderEpoch`).

    After the epoch fence, the cache's `end_offset_for`; an undefined answer is still error NONE with
    `(-1, -1)`, and an error always carries `(-1, -1)`, the response's defaults.
    """
    error = check_current_leader_epoch(current_leader_epoch, leader_epoch)
    if error is not ErrorCode.NONE:
        return error, UNDEFINED_EPOCH_END_OFFSET
    answer = leader_cache.end_offset_for(requested_epoch, leader_log_end_offset)
    if answer.end_offset == UNDEFINED_EPOCH_OFFSET:
        # UnifiedLog.endOffsetForEpoch turns an undefined offset into None, answered as the defaults.
        return ErrorCode.NONE, UNDEFINED_EPOCH_END_OFFSET
    return ErrorCode.NONE, answer


def check_fetch_divergence(
    leader_cache: LeaderEpochCache,
    leader_log_end_offset: int,
    leader_log_start_offset: int,
    leader_epoch: int,
    current_leader_epoch: int,
    fetch_offset: int,
    last_fetched_epoch: int,
) -> DivergenceCheck:
    """The leader side of a follower's Fetch (v12+) for one partition, before any record is read.

    In Kafka's order (`Partition.fetchRecords` then `readRecords`, then the log's own range check):

    1. the epoch fence on `current_leader_epoch` (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH);
    2. if `last_fetched_epoch` is given (>= 0): the leader's end of that epoch; undefined, or a fetch offset
       below the log start, is OFFSET_OUT_OF_RANGE; an end before the fetch offset, or a smaller epoch, is a
       diverging epoch (reported instead of records);
    3. otherwise, as `UnifiedLog.read`: a fetch offset below the log start or beyond the log end is
       OFFSET_OUT_OF_RANGE, and anything else may be read.
    """
    assert 0 <= leader_log_start_offset <= leader_log_end_offset, (leader_log_start_offset, leader_log_end_offset)
    # FetchRequest reads any negative epoch as "not given" (its optionalEpoch).
    error = check_current_leader_epoch(max(current_leader_epoch, UNDEFINED_EPOCH), leader_epoch)
    if error is not ErrorCode.NONE:
        return DivergenceCheck(None, error)
    if last_fetched_epoch >= 0:
        epoch_end = leader_cache.end_offset_for(last_fetched_epoch, leader_log_end_offset)
        if epoch_end.end_offset == UNDEFINED_EPOCH_OFFSET or epoch_end.epoch == UNDEFINED_EPOCH:
            return DivergenceCheck(None, ErrorCode.OFFSET_OUT_OF_RANGE)
        # Below the log start is out of range whether or not the epochs diverge.
        if fetch_offset < leader_log_start_offset:
            return DivergenceCheck(None, ErrorCode.OFFSET_OUT_OF_RANGE)
        if epoch_end.epoch < last_fetched_epoch or epoch_end.end_offset < fetch_offset:
            return DivergenceCheck(epoch_end, ErrorCode.NONE)
    if not leader_log_start_offset <= fetch_offset <= leader_log_end_offset:
        return DivergenceCheck(None, ErrorCode.OFFSET_OUT_OF_RANGE)
    return DivergenceCheck(None, ErrorCode.NONE)


def offset_truncation_state(
    leader: EpochEndOffset,
    follower_cache: LeaderEpochCache,
    follower_log_end_offset: int,
    follower_high_watermark: int,
) -> TruncationDecision:
    """Kafka's `getOffsetTruncationState`: where to cut the follower's log, given the leader's `(epoch, end)`.

    `leader` is either an OffsetsForLeaderEpoch answer or a Fetch response's diverging epoch; see the module's
    table. An incomplete decision (KIP-279) means: cut there, then ask again with the follower's new latest
    epoch (with truncation on fetch, simply fetch again with that `last_fetched_epoch`).
    """
    assert 0 <= follower_high_watermark <= follower_log_end_offset, (follower_high_watermark, follower_log_end_offset)
    follower_leo = follower_log_end_offset
    if leader.end_offset == UNDEFINED_EPOCH_OFFSET:
        # The leader does not know the epoch: fall back to the initial fetch offset, the high watermark.
        decision = TruncationDecision(follower_high_watermark, completed=True)
    elif leader.epoch == UNDEFINED_EPOCH:
        # OffsetsForLeaderEpoch v0 (inter-broker protocol < 2.0): an offset without its epoch.
        decision = TruncationDecision(min(leader.end_offset, follower_leo), completed=True)
    else:
        follower = follower_cache.end_offset_for(leader.epoch, follower_leo)
        if follower.end_offset == UNDEFINED_EPOCH_OFFSET:
            # The follower tracked no epoch at or below the leader's (new broker, or data from before epochs):
            # the leader's offset is safe to cut to.
            decision = TruncationDecision(min(leader.end_offset, follower_leo), completed=True)
        elif follower.epoch != leader.epoch:
            # The follower never had the leader's epoch: cut to the end of its own largest earlier epoch and
            # ask the leader about that one (KIP-279), rather than trusting an offset from another history.
            decision = TruncationDecision(min(follower.end_offset, follower_leo), completed=False)
        else:
            decision = TruncationDecision(min(follower.end_offset, leader.end_offset, follower_leo), completed=True)
    assert 0 <= decision.truncate_to <= follower_leo, (decision, follower_leo)
    return decision


def legacy_truncate_to_high_watermark(follower_high_watermark: int, follower_log_end_offset: int) -> TruncationDecision:
    """Before KIP-101 a restarting follower cut its log to its own high watermark.

    Kept only to reproduce the data loss KIP-101 fixed: the follower's high watermark lags the leader's by one
    fetch round trip, so this cuts records the leader already counts as committed.
    """
    assert 0 <= follower_high_watermark <= follower_log_end_offset, (follower_high_watermark, follower_log_end_offset)
    return TruncationDecision(follower_high_watermark, completed=True)
