"""The demo's judgement of a run, without a cluster: what counts as lost, and when the demo says a run broke its
promise (the legacy run must lose an acknowledged record and its audit exit 1; the other runs lose nothing and
their audits exit 0).

Method: RunResults built by hand as the schedules fill them in, given to `RunResult.lost` and `demo.expected`.
"""

from __future__ import annotations

from pathlib import Path

from hightide.client import demo

ACKED = {f"m{i}": i - 1 for i in range(1, 11)}


def run(mode: str, consumed: dict[str, int], audit_exit: int | None) -> demo.RunResult:
    result = demo.RunResult("kip101", mode, Path("/nowhere"), acknowledged=dict(ACKED), consumed=consumed)
    result.read_back = True
    if audit_exit is not None:
        result.audit = demo.Verdict(["hightide", "history", "audit"], audit_exit, "verdict")
    return result


def test_an_acknowledged_record_missing_or_at_another_offset_is_lost() -> None:
    consumed = {v: o for v, o in ACKED.items() if o < 5}
    consumed["m6"] = 7  # read back, but not where it was acknowledged
    assert run("legacy", consumed, 1).lost == {"m6": 5, "m7": 6, "m8": 7, "m9": 8, "m10": 9}


def test_nothing_counts_as_lost_before_the_partition_was_read_back() -> None:
    result = run("legacy", {}, None)
    result.read_back = False
    assert result.lost == {}


def test_the_legacy_run_keeps_its_promise_only_with_a_loss_and_a_failing_audit() -> None:
    lossy = {v: o for v, o in ACKED.items() if o < 5}
    assert demo.expected(run("legacy", lossy, 1)) == []
    assert demo.expected(run("legacy", dict(ACKED), 1))  # nothing lost: the race was never won
    assert demo.expected(run("legacy", lossy, 0))  # the audit missed the loss
    assert demo.expected(run("legacy", lossy, None))  # the audit never ran


def test_the_epoch_run_keeps_its_promise_only_with_nothing_lost_and_a_clean_audit() -> None:
    assert demo.expected(run("epochs", dict(ACKED), 0)) == []
    assert demo.expected(run("epochs", {v: o for v, o in ACKED.items() if o < 5}, 0))
    assert demo.expected(run("epochs", dict(ACKED), 1))
    assert demo.expected(run("epochs", dict(ACKED), 2))  # `hightide history` missing or refusing the lake


def test_a_missing_history_command_is_named_in_the_verdict() -> None:
    output = "usage: hightide [-h] COMMAND ...\nhightide: error: argument COMMAND: invalid choice: 'history' (...)"
    assert demo.Verdict([], 2, output).headline == "`hightide history` is not in this build"
    assert demo.Verdict([], 1, "2 violations\nfirst: ...").headline == "2 violations"
