"""One local Spark session for the whole pipeline test session (starting one takes seconds)."""

import pytest


@pytest.fixture(scope="session")
def spark():
    from pipeline.session import spark_session

    session = spark_session("railflow-pipeline-tests", master="local[2]", driver_memory="2g",
                            shuffle_partitions=4)
    yield session
