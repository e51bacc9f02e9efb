"""Shared fixtures: the seed's example and the W3 demo, compiled once per session."""

import pytest

from workflows import compile_version
from workflows.examples import W3_METRICS, sift_example, w3_demo


@pytest.fixture(scope="session")
def sift():
    return compile_version(sift_example(), 1)


@pytest.fixture(scope="session")
def w3():
    return compile_version(w3_demo(), 1, known_metrics=W3_METRICS)
