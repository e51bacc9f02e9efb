"""The web console: React + TypeScript (Vite) in ``console/src``, built into ``console/dist``
and served by the runner at ``/console`` (``runner.api.console_static``).

It talks to the HTTP API only, through a client generated from ``console/openapi.json``
(``python -m runner.api.openapi_doc`` rewrites it). ``make console`` builds it (npm ci, vite
build) when its sources changed; ``tests/console`` drives it in Debian's Chromium.
"""
