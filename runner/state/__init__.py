"""The replicated state of the runner: DuckDB tables, the log entries and ``apply``.

``RunnerStateMachine`` implements ``replog.StateMachine``. ``apply(entry)`` is a pure function
of (state, entry) (ARCHITECTURE.md §3): time is ``entry.ts``, ids derive from event ids and
offsets, every query that feeds a decision has a total ORDER BY, and effects are returned as
data (``effects``) for the leader to execute. Callers build entries with ``entries.encode``.
"""
