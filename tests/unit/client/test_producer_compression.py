"""The own producer's compression.type: Kafka's name, values and message for a bad one."""

from __future__ import annotations

import pytest

from hightide.client.producer import COMPRESSION_TYPES, ProducerConfig
from hightide.protocol.records import Compression


def test_compression_type_takes_kafkas_five_values_and_defaults_to_none() -> None:
    assert ProducerConfig.from_properties({}).compression_type == "none"
    assert ProducerConfig.from_properties({"compression.type": "snappy"}).compression_type == "snappy"
    assert {name: int(codec) for name, codec in COMPRESSION_TYPES.items()} == {
        "none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4  # Kafka's CompressionType ids
    }  # fmt: skip
    assert set(COMPRESSION_TYPES.values()) == set(Compression)


def test_an_unknown_compression_type_is_refused_with_kafkas_message() -> None:
    expected = r"Invalid value brotli for configuration compression\.type: String must be one of: none, gzip"
    with pytest.raises(ValueError, match=expected):
        ProducerConfig.from_properties({"compression.type": "brotli"})
