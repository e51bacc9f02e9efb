"""ZooKeeper faults for tests: expire a kazoo client's session from outside.

The known technique: a second client joins the same session (id and password) and closes it,
so the server ends the session; the first client learns it on its next reconnect
(``SessionExpiredError``, state LOST), exactly as after a long partition or a server restart
that outlived the session. Callers pass the client of the session to end.
"""

from __future__ import annotations

from kazoo.client import KazooClient


def expire_session(zk: KazooClient, hosts: str, timeout_s: float = 10.0) -> None:
    session_id, password = zk.client_id
    twin = KazooClient(hosts=hosts, client_id=(session_id, password))
    twin.start(timeout=timeout_s)
    try:
        twin.stop()  # sends closeSession: the server expires the session for both clients
    finally:
        twin.close()
