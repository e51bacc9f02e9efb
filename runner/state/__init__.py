"""The replicated state of the runner: DuckDB tables, the log entries and ``apply``.

``RunnerStateMachine`` implements ``replog.StateMachine``. ``apply(entry)`` is a pure function
of (state, entry) (ARCHITECTURE.md §3): time is ``entry.ts``, ids derive from event ids and
offsets, every query that feeds a decision has a total ORDER BY, and effects are returned as
data (``effects``) for the leader to execute. Callers build entries with ``entries.encode``.
An entry either takes full effect or none: a rejected one (``rejections``) leaves the state and
its digest unchanged on every replica, and no entry can stop the log; ``inputs`` says what an
event may feed the metrics engine; ``retention`` says when a finished run leaves DuckDB (then
readers find it in the run store).
"""
