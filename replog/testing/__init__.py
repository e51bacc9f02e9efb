"""Test support for replog: reference state machines, a seeded simulator, history checkers.

- ``kv.DuckKV``: the reference state machine (DuckDB key-value/counter) with snapshot,
  restore and digest, so replog is tested without the runner;
- ``dictkv.DictKV``: the same operations on a dict, fast enough for 10,000 simulated seeds;
- ``sim``: one thread, fake log, fake election, simulated time, injected faults
  (``python -m replog.testing.sim --seed N`` replays one seed);
- ``checker``: invariants decided from a history of requests and outcomes;
- ``node``: a node process over HTTP for the real-cluster fault tests and the benchmark.
"""
