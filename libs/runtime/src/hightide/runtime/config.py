"""Kafka-style configuration: a properties file, `HIGHTIDE_*` environment variables and `--config key=value`.

Room: libs/runtime. It owns reading and layering configuration sources (file < environment < --config) and the
typed readers that turn a string into an int, bool or string with Kafka's error messages. It knows no config
names of its own: each service passes the names it accepts (`known`), and this module must never guess a
default for a name it was not told about.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

ENV_PREFIX = "HIGHTIDE_"
# A properties file is a handful of lines; a limit keeps a wrong path (a log, a core dump) from being slurped.
properties_file_bytes_max = 1024 * 1024
# Kafka's LONG is a signed 64-bit int: no config value may be larger, whatever the reader's own range.
_LONG_MIN = -(2**63)
_LONG_MAX = 2**63 - 1
_INTEGER = re.compile(r"[+-]?[0-9]+")


class ConfigError(Exception):
    """A configuration the user gave is invalid or unreadable: a usage/input error (the CLI exits with 2)."""


def parse_properties_text(text: str) -> dict[str, str]:
    """The Java .properties subset Kafka's files use: `key=value` or `key: value` (the first `=` or `:` splits),
    `#` and `!` comment lines, blank lines; whitespace around keys and values is stripped. Later lines win."""
    properties: dict[str, str] = {}
    for line_number, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.strip()
        if not line or line[0] in "#!":
            continue
        key, value = _split_property_line(line, line_number)
        properties[key] = value
    return properties


def _split_property_line(line: str, line_number: int) -> tuple[str, str]:
    separators = [index for index in (line.find("="), line.find(":")) if index >= 0]
    if not separators:
        raise ConfigError(f"Line {line_number}: expected key=value or key: value, got {line!r}")
    separator = min(separators)
    key, value = line[:separator].strip(), line[separator + 1 :].strip()
    if not key:
        raise ConfigError(f"Line {line_number}: empty config name in {line!r}")
    return key, value


def parse_overrides(items: Sequence[str]) -> dict[str, str]:
    """Repeated `--config key=value` arguments; the value may contain `=` and may be empty. Later items win."""
    overrides: dict[str, str] = {}
    for item in items:
        key, separator, value = item.partition("=")
        if not separator:
            raise ConfigError(f"Invalid --config {item!r}: expected key=value")
        if not key.strip():
            raise ConfigError(f"Invalid --config {item!r}: empty config name")
        overrides[key.strip()] = value.strip()
    return overrides


def env_overrides(environ: Mapping[str, str], known: Collection[str]) -> dict[str, str]:
    """`HIGHTIDE_REPLICA_LAG_TIME_MAX_MS=5000` -> `replica.lag.time.max.ms`, for names in `known` only: other
    `HIGHTIDE_*` variables are someone else's (HIGHTIDE_SEED, HIGHTIDE_CLUSTER_ID, ...) and are left alone."""
    overrides: dict[str, str] = {}
    for variable, value in environ.items():
        if not variable.startswith(ENV_PREFIX):
            continue
        name = variable[len(ENV_PREFIX) :].lower().replace("_", ".")
        if name in known:
            overrides[name] = value.strip()
    return overrides


def read_properties_file(path: Path) -> dict[str, str]:
    """The properties in `path`; a missing, unreadable, oversized or undecodable file is a ConfigError."""
    try:
        with path.open("rb") as file:
            data = file.read(properties_file_bytes_max + 1)
    except OSError as error:
        raise ConfigError(f"Cannot read config file {path}: {error.strerror or error}") from None
    if len(data) > properties_file_bytes_max:
        raise ConfigError(f"Config file {path} is larger than {properties_file_bytes_max} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"Config file {path} is not UTF-8: {error.reason}") from None
    try:
        return parse_properties_text(text)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None


def load_properties(
    *,
    known: Collection[str],
    config_file: Path | None = None,
    overrides: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The layered configuration: file < environment < `--config`. A name the file or `--config` gives that is
    not in `known` is a typo the user must hear about (Kafka rejects it too); the environment is filtered."""
    properties: dict[str, str] = {}
    if config_file is not None:
        properties.update(_only_known(read_properties_file(config_file), known))
    properties.update(env_overrides(os.environ if environ is None else environ, known))
    properties.update(_only_known(parse_overrides(overrides), known))
    return properties


def _only_known(properties: dict[str, str], known: Collection[str]) -> dict[str, str]:
    for name in properties:
        if name not in known:
            raise ConfigError(f"Unknown config name: {name}")
    return properties


def get_int(
    props: Mapping[str, str], name: str, default: int, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """An integer config (Kafka's INT/LONG), `default` when absent, checked against `minimum`..`maximum`."""
    assert minimum is None or maximum is None or minimum <= maximum, (name, minimum, maximum)
    raw = props.get(name)
    if raw is None:
        return default
    text = raw.strip()
    if not _INTEGER.fullmatch(text) or not _LONG_MIN <= int(text) <= _LONG_MAX:
        raise _invalid(name, raw, "Not a number of type LONG")
    value = int(text)
    if minimum is not None and value < minimum:
        raise _invalid(name, raw, f"Value must be at least {minimum}")
    if maximum is not None and value > maximum:
        raise _invalid(name, raw, f"Value must be no more than {maximum}")
    return value


def get_bool(props: Mapping[str, str], name: str, default: bool) -> bool:
    """A boolean config: `true` or `false`, case-insensitive, as Kafka's ConfigDef parses BOOLEAN."""
    raw = props.get(name)
    if raw is None:
        return default
    text = raw.strip().lower()
    if text not in ("true", "false"):
        raise _invalid(name, raw, "Expected value to be either true or false")
    return text == "true"


def get_str(props: Mapping[str, str], name: str, default: str, *, choices: Collection[str] | None = None) -> str:
    """A string config, `default` when absent; with `choices`, one of them (Kafka's ValidString)."""
    assert choices is None or default in choices, (name, default, choices)
    value = props.get(name)
    if value is None:
        return default
    if choices is not None and value not in choices:
        raise _invalid(name, value, f"String must be one of: {', '.join(sorted(choices))}")
    return value


def _invalid(name: str, value: str, reason: str) -> ConfigError:
    return ConfigError(f"Invalid value {value} for configuration {name}: {reason}")
