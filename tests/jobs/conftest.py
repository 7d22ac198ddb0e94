"""The jobs tier: PySpark on small histories, agreeing with libs/audit. One local Spark session serves the whole
test session (starting one costs seconds); it binds to 127.0.0.1 and has no UI.

It has the settings of the commands' short session for small histories (`hightide.history.spark`): the client
compiler only and no generated code. The tier's histories are a few thousand events, where the driver's planning and
Janino compiles were the cost: one parity audit took 110 s of driver JVM CPU with the defaults, 75 s with the client
compiler only and 59 s with both (cold JVM, measured A/B). The long jobs' generated code is Spark's to keep equal to
its interpreted path; the rules under test are the same either way."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from hightide.history.spark import DATAFRAME_DEBUGGING, INTERPRETED, SHORT_JOB_JAVA_OPTIONS, resolve_names_once


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
        .config("spark.driver.extraJavaOptions", SHORT_JOB_JAVA_OPTIONS)
        .config(DATAFRAME_DEBUGGING, "false")  # as every session of the commands (`hightide.history.spark`)
    )
    for key, value in INTERPRETED.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    resolve_names_once(session)  # as every session of the commands
    yield session
    session.stop()
