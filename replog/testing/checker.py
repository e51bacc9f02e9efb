"""Invariant checkers that decide validity from a history alone (Jepsen style).

Inputs are plain data: the log as (offset, Entry) pairs, the acknowledged requests, what each
replica applied and the digests it computed. Each checker returns a list of problems; an empty
list means the history is valid. The fence rule is re-implemented here on purpose, so the
checker does not trust the code it checks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from replog.entry import Entry

problems_max = 20  # a broken run reports this many problems, not thousands


@dataclass(frozen=True)
class Ack:
    """A request a client saw acknowledged."""

    request: str
    offset: int
    writer_id: int
    kind: str
    payload: bytes


def accepted_entries(log: Iterable[tuple[int, Entry]]) -> dict[int, Entry]:
    """The entries every replica must apply: (writer_id, seq) strictly increasing."""
    best = (-1, -1)
    out: dict[int, Entry] = {}
    for offset, entry in log:
        key = (entry.writer_id, entry.seq)
        if key > best:
            best = key
            out[offset] = entry
    return out


def check_acked(acks: Iterable[Ack], accepted: Mapping[int, Entry]) -> list[str]:
    """No acknowledged write lost: each ack names an accepted entry holding its request."""
    problems = []
    for ack in acks:
        entry = accepted.get(ack.offset)
        if entry is None:
            problems.append(f"{ack.request}: acknowledged at {ack.offset}, not applied there")
        elif (entry.writer_id, entry.kind, entry.payload) != (ack.writer_id, ack.kind, ack.payload):
            problems.append(
                f"{ack.request}: acknowledged at {ack.offset}, which holds another entry"
            )
        if len(problems) >= problems_max:
            break
    return problems


def check_applied(
    replica: str,
    applied: list[tuple[int, int, int]],
    accepted: Mapping[int, Entry],
    start_offset: int,
    end_offset: int,
) -> list[str]:
    """A replica applied exactly the accepted entries in [start_offset, end_offset], in order.

    ``applied`` holds (offset, writer_id, seq). This catches an entry from a fenced writer,
    a duplicate, a gap and a reordering.
    """
    expected = [
        (o, e.writer_id, e.seq)
        for o, e in sorted(accepted.items())
        if start_offset <= o <= end_offset
    ]
    if applied == expected:
        return []
    exp = set(expected)
    got = set(applied)
    extra = sorted(got - exp)[:5]
    missing = sorted(exp - got)[:5]
    return [
        f"{replica}: applied {len(applied)} entries, expected {len(expected)} in "
        f"[{start_offset}, {end_offset}]; not accepted but applied: {extra}; "
        f"accepted but not applied: {missing}"
    ]


def check_digests(digests: Mapping[str, Mapping[int, str]]) -> list[str]:
    """Every replica's digest is equal at the same offset."""
    problems = []
    reference: dict[int, tuple[str, str]] = {}
    for replica, by_offset in sorted(digests.items()):
        for offset, digest in by_offset.items():
            seen = reference.setdefault(offset, (replica, digest))
            if seen[1] != digest:
                problems.append(f"digest at offset {offset}: {seen[0]} != {replica}")
                if len(problems) >= problems_max:
                    return problems
    return problems


def check_monotonic_ts(replica: str, ts: list[int]) -> list[str]:
    """Applied time never goes backwards."""
    for a, b in zip(ts, ts[1:], strict=False):
        if b < a:
            return [f"{replica}: applied ts went back from {a} to {b}"]
    return []
