"""The generic replicated log: entries, fencing by writer id, election, and the node loop.

The leader appends an opaque entry, waits until its own state machine applied it, then
acknowledges; followers apply the same entries in the same order. Callers supply a
``StateMachine`` and a log and election adapter (Kafka + ZooKeeper, or the embedded file log).
The core is pure so the seeded simulation in ``replog.testing`` can drive it.
"""
