"""Event schemas: the field types criteria may read as ``event.<field>``.

The demo ``order`` event carries the synthetic transaction fields of WORKLOADS.md. Money is an
integer in minor units. A workflow may declare its own ``event_schema`` instead.
"""

from __future__ import annotations

from typing import Literal

FieldType = Literal["string", "int", "double", "bool"]

ORDER_EVENT_SCHEMA: dict[str, FieldType] = {
    "event_id": "string",
    "ts": "int",
    "card": "string",
    "customer": "string",
    "merchant": "string",
    "mcc": "string",
    "country": "string",
    "region": "string",
    "channel": "string",
    "device": "string",
    "ip": "string",
    "shipping_address": "string",
    "amount": "int",
    "currency": "string",
    "is_fraud": "bool",
    "is_storno": "bool",
    "is_alert": "bool",
}

_DEFAULT_SCHEMAS: dict[str, dict[str, FieldType]] = {"order": ORDER_EVENT_SCHEMA}


def default_event_schema(event_type: str) -> dict[str, FieldType] | None:
    """The built-in schema of an event type, or None when there is none."""
    schema = _DEFAULT_SCHEMAS.get(event_type)
    return dict(schema) if schema is not None else None
