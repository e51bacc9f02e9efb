"""Metric definitions: define, list, drop."""

from __future__ import annotations

from fastapi import APIRouter

from runner import operations as ops
from runner.api.deps import Admin, Analyst, Manager, Svc
from runner.api.models import MetricCreate, MetricDefined, MetricPublic
from runner.state import queries

router = APIRouter(prefix="/v1/metrics", tags=["metrics"])


@router.get("", response_model=list[MetricPublic])
def list_metrics(svc: Svc, _: Analyst):
    return ops._read(svc, queries.metrics)


@router.post("", response_model=MetricDefined, status_code=201)
async def define(body: MetricCreate, svc: Svc, _: Manager):
    """Define metrics in the metric language, e.g. ``SELECT COUNT(*) AS n FROM payments
    GROUP BY card RANGE 5 MINUTES``; they count events from now on."""
    return await ops.define_metric(svc, body.text)


@router.delete("/{name}", response_model=dict[str, str])
async def drop(name: str, svc: Svc, _: Admin):
    """Drop a metric no active workflow reads."""
    return await ops.drop_metric(svc, name)
