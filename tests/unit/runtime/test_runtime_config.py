"""Kafka-style configuration: the .properties subset, `--config` and `HIGHTIDE_*` overrides, their precedence,
and the typed readers.

Method: plain inputs in, dicts or values out; every ConfigError path has a test that names what the user sees.
Files are real files in pytest's tmp_path; the environment is an explicit mapping, never os.environ.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hightide.runtime.config import (
    ConfigError,
    env_overrides,
    get_bool,
    get_int,
    get_str,
    load_properties,
    parse_overrides,
    parse_properties_text,
    properties_file_bytes_max,
)

KNOWN = ("replica.lag.time.max.ms", "min.insync.replicas", "unclean.leader.election.enable", "nats.url")


# parse_properties_text


def test_properties_text_takes_equals_colon_comments_and_blank_lines() -> None:
    text = """
    # a comment
    ! another comment
    replica.lag.time.max.ms = 5000
    min.insync.replicas: 2
    nats.url=nats://127.0.0.1:4222
    """
    assert parse_properties_text(text) == {
        "replica.lag.time.max.ms": "5000",
        "min.insync.replicas": "2",
        "nats.url": "nats://127.0.0.1:4222",
    }


def test_properties_text_splits_at_the_first_separator_and_allows_empty_values() -> None:
    assert parse_properties_text("a=b=c\nd:e=f\ng=\n") == {"a": "b=c", "d": "e=f", "g": ""}


def test_properties_text_later_lines_win() -> None:
    assert parse_properties_text("a=1\na=2") == {"a": "2"}


def test_a_line_without_separator_is_an_error_naming_its_line_number() -> None:
    with pytest.raises(ConfigError, match=r"Line 3: .*'oops'"):
        parse_properties_text("a=1\n# comment\noops\n")


def test_a_line_with_an_empty_key_is_an_error() -> None:
    with pytest.raises(ConfigError, match="Line 1: empty config name"):
        parse_properties_text(" = value")


# parse_overrides


def test_overrides_split_at_the_first_equals_sign() -> None:
    assert parse_overrides(["a=1", "b=x=y", "c="]) == {"a": "1", "b": "x=y", "c": ""}


def test_later_overrides_win() -> None:
    assert parse_overrides(["a=1", "a=2"]) == {"a": "2"}


@pytest.mark.parametrize(("item", "message"), [("novalue", "expected key=value"), ("=5", "empty config name")])
def test_a_malformed_override_is_an_error(item: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_overrides([item])


# env_overrides


def test_environment_variables_map_to_known_dotted_names_only() -> None:
    environ = {
        "HIGHTIDE_REPLICA_LAG_TIME_MAX_MS": "5000",
        "HIGHTIDE_NATS_URL": "nats://elsewhere:4222",
        "HIGHTIDE_SEED": "7",
        "REPLICA_LAG_TIME_MAX_MS": "1",
    }
    assert env_overrides(environ, KNOWN) == {
        "replica.lag.time.max.ms": "5000",
        "nats.url": "nats://elsewhere:4222",
    }


def test_reserved_environment_variables_are_ignored_when_not_known() -> None:
    environ = {"HIGHTIDE_NATS_URL": "nats://x:1", "HIGHTIDE_CLUSTER_ID": "c"}
    assert env_overrides(environ, ("min.insync.replicas",)) == {}


# load_properties


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "server.properties"
    path.write_text(text, encoding="utf-8")
    return path


def test_precedence_is_file_then_environment_then_config_flag(tmp_path: Path) -> None:
    config_file = _write(tmp_path, "replica.lag.time.max.ms=1000\nmin.insync.replicas=1\nnats.url=nats://file:1\n")
    environ = {"HIGHTIDE_REPLICA_LAG_TIME_MAX_MS": "2000", "HIGHTIDE_MIN_INSYNC_REPLICAS": "2"}
    props = load_properties(known=KNOWN, config_file=config_file, overrides=["min.insync.replicas=3"], environ=environ)
    assert props == {
        "replica.lag.time.max.ms": "2000",
        "min.insync.replicas": "3",
        "nats.url": "nats://file:1",
    }


def test_no_sources_give_no_properties() -> None:
    assert load_properties(known=KNOWN, environ={}) == {}


def test_environ_defaults_to_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIGHTIDE_MIN_INSYNC_REPLICAS", "2")
    assert load_properties(known=KNOWN)["min.insync.replicas"] == "2"


def test_an_unknown_name_in_the_file_is_an_error(tmp_path: Path) -> None:
    config_file = _write(tmp_path, "replica.lag.time.max.ms=1\nreplica.lag.time.max=2\n")
    with pytest.raises(ConfigError, match=r"^Unknown config name: replica.lag.time.max$"):
        load_properties(known=KNOWN, config_file=config_file, environ={})


def test_an_unknown_name_in_config_flags_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"^Unknown config name: segment.bytes$"):
        load_properties(known=KNOWN, overrides=["segment.bytes=1"], environ={})


def test_a_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"Cannot read config file .*missing\.properties"):
        load_properties(known=KNOWN, config_file=tmp_path / "missing.properties", environ={})


def test_a_directory_is_an_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Cannot read config file"):
        load_properties(known=KNOWN, config_file=tmp_path, environ={})


def test_a_file_that_is_not_utf8_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "binary.properties"
    path.write_bytes(b"a=\xff\xfe\n")
    with pytest.raises(ConfigError, match="is not UTF-8"):
        load_properties(known=KNOWN, config_file=path, environ={})


def test_an_oversized_file_is_an_error(tmp_path: Path) -> None:
    config_file = _write(tmp_path, "#" * (properties_file_bytes_max + 1))
    with pytest.raises(ConfigError, match="is larger than"):
        load_properties(known=KNOWN, config_file=config_file, environ={})


def test_a_malformed_file_names_the_file_and_line(tmp_path: Path) -> None:
    config_file = _write(tmp_path, "min.insync.replicas=2\nbroken\n")
    with pytest.raises(ConfigError, match=r"server.properties: Line 2"):
        load_properties(known=KNOWN, config_file=config_file, environ={})


# typed readers


def test_get_int_reads_the_value_or_the_default() -> None:
    props = {"min.insync.replicas": " 2 ", "replica.lag.time.max.ms": "-5"}
    assert get_int(props, "min.insync.replicas", 1) == 2
    assert get_int(props, "replica.lag.time.max.ms", 30_000) == -5
    assert get_int(props, "absent", 7, minimum=100) == 7


@pytest.mark.parametrize("value", ["abc", "1.5", "", "1_000", "9223372036854775808", "٣"])
def test_get_int_rejects_what_is_not_a_long(value: str) -> None:
    with pytest.raises(ConfigError, match=f"^Invalid value {value} for configuration x: Not a number of type LONG$"):
        get_int({"x": value}, "x", 0)


def test_get_int_checks_the_range() -> None:
    with pytest.raises(ConfigError, match=r"^Invalid value 0 for configuration x: Value must be at least 1$"):
        get_int({"x": "0"}, "x", 1, minimum=1)
    with pytest.raises(ConfigError, match=r"^Invalid value 11 for configuration x: Value must be no more than 10$"):
        get_int({"x": "11"}, "x", 1, maximum=10)
    assert get_int({"x": "10"}, "x", 1, minimum=1, maximum=10) == 10


@pytest.mark.parametrize(("value", "expected"), [("true", True), ("FALSE", False), (" True ", True)])
def test_get_bool_is_case_insensitive(value: str, expected: bool) -> None:
    assert get_bool({"unclean.leader.election.enable": value}, "unclean.leader.election.enable", False) is expected


def test_get_bool_defaults_and_rejects_anything_else() -> None:
    assert get_bool({}, "x", True) is True
    with pytest.raises(ConfigError, match=r"^Invalid value yes for configuration x: Expected value to be either"):
        get_bool({"x": "yes"}, "x", False)


def test_get_str_reads_the_value_or_the_default_and_checks_choices() -> None:
    assert get_str({"acks": "all"}, "acks", "1", choices=("0", "1", "all")) == "all"
    assert get_str({}, "acks", "1") == "1"
    expected = r"^Invalid value 2 for configuration acks: String must be one of: 0, 1, all$"
    with pytest.raises(ConfigError, match=expected):
        get_str({"acks": "2"}, "acks", "1", choices=("all", "0", "1"))
