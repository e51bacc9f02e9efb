"""Size limits every request meets at the API, before anything reaches the log.

A request the log or the run store cannot take must be refused here with a 4xx naming the
field: once appended, an entry is applied by every replica, and a value the run-store writer
cannot index would be retried for ever. Callers run ``check_event`` / ``check_fields`` on the
decoded body and its encoded entry payload; ``body_bytes_max(path)`` bounds what the HTTP layer
reads at all (Content-Length first, then a streamed count).
"""

from __future__ import annotations

from typing import Any

from runner.errors import RequestInvalid
from runner.runstore.keys import value_bytes_max as index_value_bytes_max
from runner.state.machine import event_bytes_max

# Whitespace and escapes: a body may be larger than the entry it encodes to, but not by much.
event_body_bytes_max = 2 * event_bytes_max
request_bytes_max = 1024 * 1024  # any other body (a workflow definition is the largest)
# A follower forwards an entry base64-encoded in JSON: 4/3 of it, plus a little.
forwarded_bytes_max = 2 * request_bytes_max
key_bytes_max = 256  # a field name of an event or an app result, at any depth
value_bytes_max = 16 * 1024  # one string value of an event or an app result
depth_max = 16  # nested objects and lists; deeper input is refused, not walked
# Event fields that become run-store index values (``RunRecord.index_values``).
INDEXED_FIELDS = ("order_id", "card", "customer")


def body_bytes_max(path: str) -> int:
    if path == "/v1/events":
        return event_body_bytes_max
    return forwarded_bytes_max if path.startswith("/internal/") else request_bytes_max


def check_event(event_id: str, data: dict[str, Any], payload: bytes) -> None:
    """Refuse an event whose entry or index values are larger than what stores it allows."""
    if len(payload) > event_bytes_max:
        raise RequestInvalid("data", f"the event encodes to {len(payload)} bytes, more than "
                                     f"{event_bytes_max}", 413)
    # The event id is the order index value when ``data.order_id`` is absent.
    if len(event_id.encode()) > index_value_bytes_max:
        raise RequestInvalid("event_id", f"must be at most {index_value_bytes_max} bytes "
                                         f"in UTF-8")
    for name in INDEXED_FIELDS:
        value = data.get(name)
        if value is not None and len(str(value).encode()) > index_value_bytes_max:
            raise RequestInvalid(f"data.{name}", f"must be at most {index_value_bytes_max} "
                                                 f"bytes in UTF-8 (it is a lookup key)")
    check_fields(data, "data")


def check_fields(value: Any, field: str, depth: int = 0) -> None:
    """Key and string sizes and nesting depth of a JSON value, naming the first bad field."""
    if depth > depth_max:
        raise RequestInvalid(field, f"nested deeper than {depth_max} levels")
    if isinstance(value, str):
        if len(value) * 4 > value_bytes_max and len(value.encode()) > value_bytes_max:
            raise RequestInvalid(field, f"string longer than {value_bytes_max} bytes")
    elif isinstance(value, dict):
        for key, item in value.items():
            if len(key) * 4 > key_bytes_max and len(key.encode()) > key_bytes_max:
                raise RequestInvalid(field, f"field name longer than {key_bytes_max} bytes")
            # A string is checked here, not by a call per value (most of an order's values):
            # a call only when it could fail.
            if isinstance(item, str):
                if depth >= depth_max or len(item) * 4 > value_bytes_max:
                    check_fields(item, f"{field}.{key}", depth + 1)
            elif isinstance(item, dict | list):
                check_fields(item, f"{field}.{key}", depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, str):
                if depth >= depth_max or len(item) * 4 > value_bytes_max:
                    check_fields(item, f"{field}.{i}", depth + 1)
            elif isinstance(item, dict | list):
                check_fields(item, f"{field}.{i}", depth + 1)
