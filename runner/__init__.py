"""The workflow runner: the state machine, effects, apps, the run store, the HTTP API and CLI.

``railflow serve`` starts one node (``runner.service.Service`` behind ``runner.api.app``).
Every change of state goes through ``replog``: the API submits an entry (``state.entries``),
every node applies it with ``state.machine.RunnerStateMachine`` (a pure function of state and
entry, ARCHITECTURE.md §3) and the leader alone executes the effects it returns
(``executor``): run-store writes (``runstore``: HBase or RocksDB), app calls, signed webhooks.
Callers configure a node through ``RAILFLOW_*`` variables (``settings.Settings``); with none,
it runs embedded under ``./.railflow`` with the W3 demo workflow preloaded (``demo``).
"""
