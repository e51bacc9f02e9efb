"""The static types of CEL criteria, as the checker in :mod:`workflows.cel_check` sees them.

Records are the typed variables a criterion may read (``event``, ``scores``, ``metrics``,
``apps`` and each ``apps.<node_id>``); reading a field a record does not declare is an error,
with a hint when the field exists elsewhere in the workflow but is not known at that edge.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class CelType:
    """A CEL type: a primitive by name, ``list``/``map`` with parameters, or ``dyn``."""

    name: str
    elem: CelType | None = None  # list element, map value
    key: CelType | None = None  # map key

    def __str__(self) -> str:
        if self.name == "list":
            return f"list({self.elem})"
        if self.name == "map":
            return f"map({self.key}, {self.elem})"
        return self.name


INT = CelType("int")
UINT = CelType("uint")
DOUBLE = CelType("double")
STRING = CelType("string")
BOOL = CelType("bool")
BYTES = CelType("bytes")
NULL = CelType("null_type")
DYN = CelType("dyn")
TYPE = CelType("type")
TIMESTAMP = CelType("google.protobuf.Timestamp")
DURATION = CelType("google.protobuf.Duration")

NUMERIC = frozenset({INT, UINT, DOUBLE})
ORDERED = frozenset({STRING, BYTES, BOOL, TIMESTAMP, DURATION})

FIELD_TYPES: Mapping[str, CelType] = {"string": STRING, "int": INT, "double": DOUBLE, "bool": BOOL}


def list_of(elem: CelType) -> CelType:
    return CelType("list", elem=elem)


def map_of(key: CelType, value: CelType) -> CelType:
    return CelType("map", elem=value, key=key)


@dataclass(frozen=True, eq=False)
class Record:
    """A variable with named, typed fields; ``open`` records accept any field as ``dyn``."""

    name: str
    fields: Mapping[str, CelType | Record]
    hints: Mapping[str, str] = field(default_factory=dict)  # field -> why it is not known here
    enums: Mapping[str, frozenset[str]] = field(default_factory=dict)  # string field -> values
    open: bool = False

    def __str__(self) -> str:
        return self.name


AnyType = CelType | Record
