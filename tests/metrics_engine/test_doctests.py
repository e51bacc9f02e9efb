"""Run the doctested examples of the public modules (they are part of the documentation)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["metrics_engine.language", "metrics_engine.predicates",
           "tests.metrics_engine.reference_states", "metrics_engine.engine",
           "metrics_engine.offline", "pipeline.synthetic"]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0
