"""A run's steps as apply records them: immutable facts, presented only when someone asks.

Apply records each step as a ``Step``: the walk's ``StepResult`` (immutable and usually shared:
the compiled version's precomputed result of that way out of the node), the step's place in
the run (``seq``) and the log time of the entry that took it (``ts``). Apply builds no dict for
it. The dict readers see (``as_dict``: the result's ``to_dict`` with ``seq`` and ``ts`` last)
and its JSON (``to_json``: DuckDB's ``steps.trace`` text, and the bytes the digest hashes,
equal to the dict's JSON) are made by whoever asks: the digest's row hash (a few byte
copies), the DuckDB flusher, the API, the run store writer.

A ``Step`` is also a read-only ``Mapping`` equal to that dict, so code written against step
dicts reads either alike: a run's path restored from DuckDB holds dicts, and a run restored
while it waited and then resumed holds both.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from workflows import StepResult

KEYS = ("node_id", "edge_id", "next_node_id", "node_kind", "default_taken", "trace", "decision",
        "seq", "ts")  # the order of a step dict's keys (and of its JSON)
_ATTRIBUTES = frozenset(KEYS[:5])  # a StepResult's attributes of the same name and value


class Step(Mapping):
    """One recorded step (see the module doc). Never changed once made."""

    __slots__ = ("result", "seq", "ts", "_json")

    def __init__(self, result: StepResult, seq: int, ts: int) -> None:
        self.result = result
        self.seq = seq
        self.ts = ts
        self._json: bytes | None = None  # made once: apply stages it, the run store writes it

    def __getitem__(self, key: str) -> Any:
        if key in _ATTRIBUTES:
            return getattr(self.result, key)
        if key == "seq":
            return self.seq
        if key == "ts":
            return self.ts
        if key == "trace" or key == "decision":
            return self.result.to_dict()[key]
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(KEYS)

    def __len__(self) -> int:
        return len(KEYS)

    def __repr__(self) -> str:
        return f"Step({self.result.node_id}->{self.result.next_node_id}, seq={self.seq})"

    def as_dict(self) -> dict[str, Any]:
        """A fresh dict (every level), as apply recorded steps before."""
        out = self.result.to_dict()
        out["seq"] = self.seq
        out["ts"] = self.ts
        return out

    def to_json(self) -> bytes:
        """``orjson.dumps(self.as_dict())``, from the result's JSON made once; made once
        itself (the step row apply stages, then every record of the run the store writes)."""
        raw = self._json
        if raw is None:
            raw = self._json = b'%b,"seq":%d,"ts":%d}' % (self.result.to_json()[:-1],
                                                          self.seq, self.ts)
        return raw


def as_dict(step: Mapping[str, Any]) -> dict[str, Any]:
    """A step of a path as a dict: a recorded ``Step`` presented, a dict (restored) as it is."""
    return step.as_dict() if step.__class__ is Step else step


def path_dicts(path: list) -> list[dict[str, Any]]:
    """A run's path as dicts (a new list; dicts restored from DuckDB are shared)."""
    return [s.as_dict() if s.__class__ is Step else s for s in path]




def node_of(step: Mapping[str, Any]) -> str:
    """The node a step left (a ``Step`` or a dict)."""
    return step.result.node_id if step.__class__ is Step else step["node_id"]
