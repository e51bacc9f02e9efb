"""Row keys shared by every run store.

Run rows: ``run/<hash4(run_id)>/<run_id>``. Index rows: ``<kind>/<hash4(value)>/<value>/<run_id>``
for kind in ``order``, ``card``, ``customer`` and ``event`` (the event id: the runs of an event
the hot state forgot); a lookup is a prefix scan of ``<kind>/<hash4(value)>/<value>/``. The
hash prefix spreads writes; the value after it keeps all runs of one order (card, customer,
event) contiguous.
"""

from __future__ import annotations

from runner.ids import hash_prefix

INDEX_KINDS = ("order", "card", "customer", "event")
value_bytes_max = 512  # longer lookup values are rejected, not truncated


def run_key(run_id: str) -> bytes:
    return f"run/{hash_prefix(run_id)}/{run_id}".encode()


def index_prefix(kind: str, value: str) -> bytes:
    if kind not in INDEX_KINDS:
        raise ValueError(f"unknown index kind {kind!r}")
    if "/" in value or len(value.encode()) > value_bytes_max:
        raise ValueError(f"{kind} value must be ≤ {value_bytes_max} bytes without '/'")
    return f"{kind}/{hash_prefix(value)}/{value}/".encode()


def index_key(kind: str, value: str, run_id: str) -> bytes:
    return index_prefix(kind, value) + run_id.encode()


def index_keys(pairs: list[tuple[str, str]], run_id: str) -> list[bytes]:
    """``index_key`` of each (kind, value) of one run, for values already checked as
    ``index_prefix`` checks them (``RunRecord.index_values``): one hash per distinct value (an
    order's id is often its event id), no second check."""
    hashed: dict[str, str] = {}
    out = []
    for kind, value in pairs:
        prefix = hashed.get(value)
        if prefix is None:
            prefix = hashed[value] = hash_prefix(value)
        out.append(f"{kind}/{prefix}/{value}/{run_id}".encode())
    return out


def run_id_of_index_key(key: bytes) -> str:
    return key.rsplit(b"/", 1)[1].decode()
