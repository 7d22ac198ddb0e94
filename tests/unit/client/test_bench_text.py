"""`hightide bench`'s text output keeps each figure's value, unit, baseline and goal in one column, however long a
name is (the Kafka workload's names run past the 44 characters the others fit in).

Method: figures with a short name and a long one are printed as text; the captured lines are read back.
"""

from __future__ import annotations

import pytest

from hightide.client.bench import NAME_WIDTH, Figure, print_figures


def test_values_line_up_when_a_name_is_longer_than_the_usual_width(capsys: pytest.CaptureFixture[str]) -> None:
    long_name = "confluent-kafka idempotent acks=all RF=3 16 KiB (MB/s, client on a CPU of its own)"
    assert len(long_name) > NAME_WIDTH
    figures = [
        Figure("kafka", "short", 1.5, "MB/s"),
        Figure("kafka", long_name, 1234.5, "MB/s", 1.5, ">= own client's", True),
    ]
    print_figures(figures, "text")
    short, long = capsys.readouterr().out.splitlines()
    assert short.index("1.50") + len("1.50") == long.index("1,234.50") + len("1,234.50")
    assert long.startswith(f"kafka     {long_name} ")  # the whole name, then the value
    assert long.endswith("MB/s       baseline 1.50  goal >= own client's: met")


def test_short_names_keep_the_usual_width() -> None:
    line = Figure("append", "x", 2.0, "MB/s").line()
    assert line == f"{'append':<9} {'x':<{NAME_WIDTH}} {2.0:>14,.2f} {'MB/s':<10}"
