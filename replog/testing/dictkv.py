"""A key-value/counter state machine on a dict: the fast twin of ``DuckKV`` for simulation."""

from __future__ import annotations

import json
import pathlib
from typing import Any

from replog.entry import Entry
from replog.testing import ops


class _DictSnapshot:
    def __init__(self, data: dict[str, int], offset: int):
        self._data = dict(data)
        self._offset = offset

    def write(self, dir: pathlib.Path) -> None:
        (dir / "kv.json").write_text(json.dumps({"offset": self._offset, "data": self._data}))


class DictKV:
    def __init__(self) -> None:
        self.data: dict[str, int] = {}
        self._applied = -1

    @property
    def applied_offset(self) -> int:
        return self._applied

    def apply(self, entry: Entry) -> list[Any]:
        self._applied = entry.offset
        if entry.kind != ops.KIND:
            return []
        op = ops.decode(entry.payload)
        key = op["key"]
        if op["op"] == "put":
            self.data[key] = op["value"]
        elif op["op"] == "incr":
            self.data[key] = self.data.get(key, 0) + op["by"]
        elif op["op"] == "del":
            self.data.pop(key, None)
            return [{"key": key, "value": None}]
        return [{"key": key, "value": self.data[key]}]

    def get(self, key: str) -> int | None:
        return self.data.get(key)

    def snapshot(self) -> _DictSnapshot:
        return _DictSnapshot(self.data, self._applied)

    def restore(self, dir: pathlib.Path) -> None:
        saved = json.loads((dir / "kv.json").read_text())
        self.data = {k: int(v) for k, v in saved["data"].items()}
        self._applied = saved["offset"]

    def digest(self) -> str:
        return ops.digest_of(sorted(self.data.items()))
