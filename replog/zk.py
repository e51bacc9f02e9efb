"""Leader election on ZooKeeper via kazoo: ephemeral sequential znodes, the smallest leads.

Each node creates ``{path}/n_<seq>`` holding its advertise URL; ``seq`` is its writer id. A
node that is not the smallest watches its predecessor only (no herd on a change). On a
suspended connection the leader is deposed at once, since its session may expire without it
knowing; if the session survives it is elected again with the same id, and if the session is
lost it rejoins with a new znode, hence a larger id.

Joining never raises into the caller's thread: a keeper thread owns every join and retries it
with capped backoff until the session is healthy (ZooKeeper or its network down, a session
expired while joining). It also checks, every few seconds, that this node's znode still exists,
so a lost watch or a missed state change cannot leave the node out of the election for good;
when the client has been disconnected for long (kazoo gave up reconnecting), it makes a new one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NoNodeError

from replog.protocols import Deposed, Elected, ElectionEvent

log = logging.getLogger(__name__)
_PREFIX = "n_"
join_backoff_min_s = 0.2
join_backoff_max_s = 5.0
keeper_check_every_s = 2.0  # how often the keeper makes sure this node is in the election


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
        self._stale: str | None = None  # my old znode a resign could not delete
        self._lost = False  # the session was lost: rejoin with a new znode on reconnect
        self._wanted = threading.Event()  # the keeper should (re)join or re-check now
        self._keeper: threading.Thread | None = None
        self._disconnected_since: float | None = None
        self.join_failures = 0  # consecutive failed joins (for /healthz)
        self.last_error: str | None = None

    def start(
        self, node_id: str, advertise_url: str, on_event: Callable[[ElectionEvent], None]
    ) -> None:
        self._on_event = on_event
        self._url = advertise_url.encode()
        self._zk = self._new_client()
        self._zk.start(timeout=max(10.0, self.session_timeout_s))
        self._zk.ensure_path(self.path)
        self._join()
        self._keeper = threading.Thread(target=self._keep, name="zk-election-keeper", daemon=True)
        self._keeper.start()

    def _new_client(self) -> KazooClient:
        # Reconnect forever: ZooKeeper being down for a while must not end the election.
        zk = KazooClient(
            hosts=self.hosts,
            timeout=self.session_timeout_s,
            connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 2.0},
        )
        zk.add_listener(self._on_state)
        return zk

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
        """Give up leadership and rejoin with a new znode (a larger writer id). Never raises."""
        with self._join_lock:
            with self._lock:
                self._depose("resigned")
                me, self._me = self._me, None
                if self._stopped:
                    return
            if me is not None and not self._lost:
                try:
                    self._zk.delete(f"{self.path}/{me}")  # type: ignore[union-attr]
                except NoNodeError:
                    pass
                except Exception:  # the session is in trouble: it dies with it, or we retry
                    log.warning("resign could not delete %s", me, exc_info=True)
                    with self._lock:
                        self._stale = me
        self._wanted.set()  # the keeper joins again, retrying until ZooKeeper answers

    def stop(self) -> None:
        self._stopped = True
        self._wanted.set()
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
        if self._stale is not None:  # a stale znode of mine would stand before the new one
            try:
                self._zk.delete(f"{self.path}/{self._stale}")  # type: ignore[union-attr]
            except NoNodeError:
                pass
            self._stale = None
        if self._me is None:
            self._zk.ensure_path(self.path)  # type: ignore[union-attr]
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
                if me is not None and self._zk.connected:
                    log.warning("my znode %s is gone: joining again", me)
                    self._depose("znode gone")
                    self._me = None
                self._wanted.set()
                return
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
            self._lost = False
        self._wanted.set()

    def _keep(self) -> None:
        """Join (again) whenever needed, with backoff, until stopped; never raises."""
        backoff = join_backoff_min_s
        while not self._stopped:
            self._wanted.wait(keeper_check_every_s)
            self._wanted.clear()
            if self._stopped:
                return
            try:
                self._replace_client_if_dead()
                if not self._zk.connected:  # type: ignore[union-attr]
                    continue  # the state listener wakes us when it reconnects
                with self._join_lock:
                    if self._lost:
                        continue
                    self._join_locked()
                self.join_failures, self.last_error = 0, None
                backoff = join_backoff_min_s
            except Exception as e:  # noqa: BLE001 - any failure: retry after a while
                self.join_failures += 1
                self.last_error = f"{type(e).__name__}: {e}"
                log.warning("joining the election failed (%d in a row), retrying in %.1fs: %s",
                            self.join_failures, backoff, self.last_error)
                time.sleep(backoff)
                backoff = min(backoff * 2, join_backoff_max_s)
                self._wanted.set()

    def _replace_client_if_dead(self) -> None:
        """A client disconnected for long (kazoo stopped trying) is replaced by a new one."""
        zk = self._zk
        if zk is None or zk.connected:
            self._disconnected_since = None
            return
        now = time.monotonic()
        if self._disconnected_since is None:
            self._disconnected_since = now
            return
        if now - self._disconnected_since < 4 * self.session_timeout_s:
            return
        log.warning("ZooKeeper client disconnected for %.0fs: starting a new one",
                    now - self._disconnected_since)
        self._disconnected_since = None
        with self._lock:
            self._depose("ZooKeeper client replaced")
            self._me = None
            self._lost = False
        try:
            zk.remove_listener(self._on_state)
            zk.stop()
            zk.close()
        except Exception:  # the old client is dropped anyway
            log.debug("closing the old kazoo client failed", exc_info=True)
        fresh = self._new_client()
        self._zk = fresh
        fresh.start(timeout=max(10.0, self.session_timeout_s))

    def _depose(self, reason: str) -> None:
        if self._leading_as is not None:
            self._leading_as = None
            self._emit(Deposed(reason))

    def _emit(self, event: ElectionEvent) -> None:
        if self._on_event is not None:
            self._on_event(event)
