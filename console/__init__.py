"""The web console: a TypeScript front end built into ``console/dist`` and served by the runner.

It talks to the HTTP API only.
"""
