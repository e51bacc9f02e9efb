"""The workflow runner: the state machine, effects, apps, the run store, the HTTP API and CLI.

``railflow serve`` starts it. Every change of state goes through ``replog``; ``apply`` is a pure
function of (state, entry) and returns effects that only the leader executes.
"""
