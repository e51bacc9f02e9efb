"""The generic replicated log: entries, fencing by writer id, election, and the node loop.

The leader appends an opaque entry, waits until its own state machine applied it, then
acknowledges; followers apply the same entries in the same order. Callers supply a
``StateMachine`` and a log and election adapter (Kafka + ZooKeeper, or the embedded file log).
The core is pure so the seeded simulation in ``replog.testing`` can drive it.
"""

from replog.core import Limits, ReplicaCore, Role
from replog.entry import KIND_LEADER_STARTED, Entry
from replog.errors import (
    AppendFailed,
    AppendTimeout,
    Fenced,
    InvariantViolation,
    NotLeader,
    Overloaded,
    ReplogError,
)
from replog.node import Node
from replog.protocols import (
    Applied,
    Deposed,
    Elected,
    Election,
    Forwarder,
    LogAdapter,
    LogReader,
    SnapshotWriter,
    StateMachine,
)

__all__ = [
    "KIND_LEADER_STARTED",
    "AppendFailed",
    "AppendTimeout",
    "Applied",
    "Deposed",
    "Elected",
    "Election",
    "Entry",
    "Fenced",
    "Forwarder",
    "InvariantViolation",
    "Limits",
    "LogAdapter",
    "LogReader",
    "Node",
    "NotLeader",
    "Overloaded",
    "ReplicaCore",
    "ReplogError",
    "Role",
    "SnapshotWriter",
    "StateMachine",
]
