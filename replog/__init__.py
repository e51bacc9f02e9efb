"""The generic replicated log: entries, fencing by writer id, election, and the node loop.

The leader appends an opaque entry, waits until its own state machine applied it, then
acknowledges; followers apply the same entries in the same order, so every node holds the
same state. The leader applies the entries it appended from what it holds, at the offsets the
log acknowledged, and reads the log only for records it did not append. ``replog`` knows
nothing of what the entries mean.

What the caller does:
- implement ``StateMachine`` (``apply`` pure and deterministic, returning effects as data;
  ``snapshot``/``restore``/``digest``/``applied_offset``); ``apply`` also receives replog's own
  kinds (``replog.LeaderStarted``: a new leader's first entry, a good moment to re-drive
  effects);
- build ``Node(sm, log, election, node_id=..., advertise_url=..., forwarder=...)`` with
  ``kafka.KafkaLog`` + ``zk.ZkElection`` (cluster) or ``filelog.FileLog`` +
  ``single.SingleNodeElection`` (embedded; a log that is a ``SendingLog``, as Kafka's, is
  written on the submitting thread, any other through an appender thread); when restoring
  from a checkpoint, pass ``start_offset = offset + 1``, ``start_writer_id`` and
  ``start_writer_seq`` = the checkpoint's fence; ``start()`` raises ``LogTruncated`` when the
  log no longer holds ``start_offset`` (retention passed the newest usable checkpoint);
- ``start()``, then ``submit(kind, payload, timeout_s)`` from any thread: the future gives
  ``Applied(offset, writer_id, effects)`` once this node applied the entry, or ``NotLeader``,
  ``Fenced``, ``AppendTimeout``, ``AppendFailed``, ``Overloaded``; a failure is indeterminate
  (the entry may still be applied); read-your-writes with ``wait_applied(offset, timeout_s)``;
- execute effects only while ``is_leader``; ``stop()`` at the end.

The core (``core``, ``fence``, ``entry``) does no I/O and reads no clock, so the seeded
simulation in ``replog.testing`` drives the same code the node runs.
"""

from replog.core import Limits, ReplicaCore, Role
from replog.entry import KIND_LEADER_STARTED, Entry
from replog.errors import (
    AppendFailed,
    AppendTimeout,
    Fenced,
    InvariantViolation,
    LogTruncated,
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
    SendingLog,
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
    "LogTruncated",
    "LogAdapter",
    "LogReader",
    "Node",
    "NotLeader",
    "Overloaded",
    "ReplicaCore",
    "ReplogError",
    "Role",
    "SendingLog",
    "SnapshotWriter",
    "StateMachine",
]
