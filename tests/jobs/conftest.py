"""The jobs tier: PySpark on small histories, agreeing with libs/audit. One local Spark session serves the whole
test session (starting one costs seconds); it binds to 127.0.0.1 and has no UI.

It runs without generated code, as the commands' short session for small histories does (`hightide.history.spark`):
the tier's histories are a few thousand events, where Janino's compiles of each plan were a cost. Unlike that
session it keeps the JVM's optimising compiler: one session here runs dozens of audits and folds, and the client
compiler alone only pays for a JVM that ends after one. The same audit of a small simulated history five times in
one JVM, driver JVM CPU per audit (load 5-6): client compiler only 79.7, 57.0, 68.0, 68.0 s; both compilers 137.6,
78.8, 56.1, 48.1, 40.8 s. The generated code is Spark's to keep equal to its interpreted path; the rules under test
are the same either way."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from hightide.history.spark import DATAFRAME_DEBUGGING, INTERPRETED, resolve_names_once


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("hightide-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config(DATAFRAME_DEBUGGING, "false")  # as every session of the commands (`hightide.history.spark`)
    )
    for key, value in INTERPRETED.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    resolve_names_once(session)  # as every session of the commands
    yield session
    session.stop()
