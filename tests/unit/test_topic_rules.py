"""ControllerApis' answers before the controller (`refusals_before_the_controller`): both front doors use them."""

from __future__ import annotations

from hightide.core.topic_rules import refusals_before_the_controller
from hightide.protocol.errors import ErrorCode


def test_a_name_twice_is_refused_once_before_any_other_check_and_an_illegal_one_names_no_topic() -> None:
    names = ["b", "bad name!", "a", "b", "x" * 250, "bad name!", "."]
    creating = refusals_before_the_controller(names, creating=True)
    assert list(creating) == ["b", "bad name!", "x" * 250]  # in the order first named; "a" and "." go on
    assert creating["b"] == creating["bad name!"] == (ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
    assert creating["x" * 250][0] is ErrorCode.INVALID_TOPIC_EXCEPTION
    assert "can't be longer than 249 characters" in creating["x" * 250][1]
    deleting = refusals_before_the_controller(names, creating=False)
    assert deleting["x" * 250] == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {'x' * 250}")
    assert refusals_before_the_controller(["a", "b"], creating=True) == {}
