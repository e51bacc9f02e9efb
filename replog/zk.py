"""Leader election on ZooKeeper via kazoo: ephemeral sequential znodes, the smallest leads.

Each node creates ``{path}/n_<seq>`` holding its advertise URL; ``seq`` is its writer id. A
node that is not the smallest watches its predecessor only (no herd on a change). On a
suspended connection the leader is deposed at once, since its session may expire without it
knowing; if the session survives it is elected again with the same id, and if the session is
lost it rejoins with a new znode, hence a larger id.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NoNodeError

from replog.protocols import Deposed, Elected, ElectionEvent

log = logging.getLogger(__name__)
_PREFIX = "n_"


def _seq(name: str) -> int:
    return int(name[len(_PREFIX) :])


class ZkElection:
    def __init__(self, hosts: str, path: str, session_timeout_s: float = 6.0):
        self.hosts = hosts
        self.path = path.rstrip("/")
        self.session_timeout_s = session_timeout_s
        self._zk: KazooClient | None = None
        self._me: str | None = None  # my znode name
        self._leading_as: int | None = None
        self._leader_url: str | None = None
        self._on_event: Callable[[ElectionEvent], None] | None = None
        self._url = b""
        self._lock = threading.RLock()
        # Serializes joins (never taken on kazoo's connection thread): a resign racing a
        # session loss must not leave two znodes of this node, one of them blocking the rest.
        self._join_lock = threading.Lock()
        self._stopped = False
        self._lost = False  # the session was lost: rejoin with a new znode on reconnect

    def start(
        self, node_id: str, advertise_url: str, on_event: Callable[[ElectionEvent], None]
    ) -> None:
        self._on_event = on_event
        self._url = advertise_url.encode()
        self._zk = KazooClient(hosts=self.hosts, timeout=self.session_timeout_s)
        self._zk.add_listener(self._on_state)
        self._zk.start(timeout=max(10.0, self.session_timeout_s))
        self._zk.ensure_path(self.path)
        self._join()

    @property
    def writer_id(self) -> int | None:
        return self._leading_as

    def leader_url(self) -> str | None:
        with self._lock:
            if self._leader_url is not None:
                return self._leader_url
        try:
            children = sorted(self._zk.get_children(self.path), key=_seq)  # type: ignore[union-attr]
            if not children:
                return None
            data, _ = self._zk.get(f"{self.path}/{children[0]}")  # type: ignore[union-attr]
        except Exception:  # no answer from ZooKeeper: no known leader
            return None
        with self._lock:
            self._leader_url = data.decode()
        return self._leader_url

    def resign(self) -> None:
        with self._join_lock:
            with self._lock:
                self._depose("resigned")
                me, self._me = self._me, None
                if self._lost or self._stopped:
                    return  # the reconnection (or nobody) rejoins
            if me is not None:
                try:
                    self._zk.delete(f"{self.path}/{me}")  # type: ignore[union-attr]
                except NoNodeError:
                    pass
                except Exception:  # the session is in trouble: _on_state rejoins after it
                    log.warning("resign could not delete %s", me, exc_info=True)
                    return
            self._join_locked()

    def stop(self) -> None:
        self._stopped = True
        with self._lock:
            self._depose("stopped")
        if self._zk is not None:
            try:
                self._zk.stop()
                self._zk.close()
            except Exception:  # stopping is best effort: the session expires anyway
                log.debug("kazoo stop failed", exc_info=True)

    # -- internals ----------------------------------------------------------------------
    def _join(self) -> None:
        with self._join_lock:
            self._join_locked()

    def _join_locked(self) -> None:
        if self._me is None:
            created = self._zk.create(  # type: ignore[union-attr]
                f"{self.path}/{_PREFIX}", self._url, ephemeral=True, sequence=True
            )
            with self._lock:
                self._me = created.rsplit("/", 1)[1]
        self._check()

    def _check(self, _event: object = None) -> None:
        """Lead if my znode is the smallest, else watch my predecessor."""
        if self._stopped or self._zk is None:
            return
        try:
            children = sorted(self._zk.get_children(self.path), key=_seq)
        except Exception:
            log.warning("election check failed", exc_info=True)
            return
        with self._lock:
            self._leader_url = None  # refreshed lazily
            me = self._me
            if me is None or me not in children:
                return  # lost with the session; _on_state rejoins
            index = children.index(me)
            if index == 0:
                if self._leading_as != _seq(me):
                    self._leading_as = _seq(me)
                    self._emit(Elected(_seq(me)))
                return
            self._depose("not the smallest znode")
            predecessor = f"{self.path}/{children[index - 1]}"
        try:
            if self._zk.exists(predecessor, watch=self._check) is None:
                self._check()  # it went away meanwhile
            # The leader's URL may change without my predecessor changing: watch the smallest.
            self._zk.exists(f"{self.path}/{children[0]}", watch=self._forget_leader)
        except Exception:  # connection trouble: the state listener takes over
            log.warning("watching the predecessor failed", exc_info=True)

    def _forget_leader(self, _event: object = None) -> None:
        with self._lock:
            self._leader_url = None

    def _on_state(self, state: str) -> None:
        # Runs on kazoo's connection thread: never block here.
        if state == KazooState.SUSPENDED:
            with self._lock:
                self._depose("ZooKeeper connection suspended")
        elif state == KazooState.LOST:
            with self._lock:
                self._depose("ZooKeeper session lost")
                self._me = None
                self._lost = True
        elif state == KazooState.CONNECTED and not self._stopped:
            self._zk.handler.spawn(self._reconnected)  # type: ignore[union-attr]

    def _reconnected(self) -> None:
        with self._lock:
            lost, self._lost = self._lost, False
            joined = self._me is not None
        try:
            if lost:
                self._join()
            elif joined:
                self._check()
        except Exception:  # the next state change tries again
            log.warning("rejoining the election failed", exc_info=True)

    def _depose(self, reason: str) -> None:
        if self._leading_as is not None:
            self._leading_as = None
            self._emit(Deposed(reason))

    def _emit(self, event: ElectionEvent) -> None:
        if self._on_event is not None:
            self._on_event(event)
