"""Executes effects on the leader: run-store writes, app calls, webhooks; wakes run waiters.

``handle(entry, effects, leader)`` is called on the node loop thread and never blocks it: run
store writes go to a bounded list that a writer thread takes whole, after lingering some tens of
milliseconds so that one wakeup and one store write serve several orders; HTTP work goes to a
private asyncio loop. What was done is reported back through ``take_confirmations()`` so the
service can append one ``EffectsDone`` entry for many effects; anything unconfirmed is
re-driven by the next leader (every effect is idempotent).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import httpx
import orjson

from runner import egress, signing, webhooks
from runner.runstore.base import RunRecord, RunStore
from runner.settings import Settings
from runner.state import entries
from runner.state.effects import CallApp, EnqueueReview, RunChanged, SendWebhook, StoreRun
from runner.state.views import record_of

log = logging.getLogger(__name__)

store_queue_runs_max = 200_000
store_batch_runs_max = 500
store_retry_ms_max = 5_000
# A write waits this long for more runs to join it. A Thrift call to HBase costs the writer
# ~300-400 µs of CPU (mostly the kernel's, loopback TCP and wakeups) besides the runs: at 500
# orders/s a 10 ms linger (~5 runs a call) spent ~80 µs per order on calls, 50 ms ~16, 100 ms
# ~8. Nothing waits for a run to reach the store: readers look into the pending rows first,
# and its confirmation goes out every ``effects_confirm_interval_ms`` (100 ms) anyway.
store_linger_s = 0.1
confirmations_max = 5_000  # per EffectsDone entry


class EffectExecutor:
    def __init__(
        self,
        settings: Settings,
        run_store: RunStore,
        submit: Callable[[str, bytes, float], Future],
        on_run_changed: Callable[[dict], None],
        counters: Any,
        app_urls: dict[str, str],
        secrets: dict[str, str],
    ) -> None:
        self._settings = settings
        self._store = run_store
        self._submit = submit
        self._on_run_changed = on_run_changed
        self._counters = counters
        self._app_urls = app_urls
        self._secrets = secrets
        self._pending: list[tuple[StoreRun, int | None]] = []  # (run, term): taken whole
        self._pending_cv = threading.Condition()
        self._lock = threading.Lock()
        self._stored: dict[str, int] = {}
        self._outbox_done: set[str] = set()
        self._running = True
        self.store_error: str | None = None  # the run store's last failure, until a write works
        self._loop = asyncio.new_event_loop()
        self._threads = [
            threading.Thread(target=self._loop.run_forever, name="effects-io", daemon=True),
            threading.Thread(target=self._store_writer, name="effects-store", daemon=True),
        ]
        for t in self._threads:
            t.start()
        self._client = asyncio.run_coroutine_threadsafe(self._make_client(), self._loop).result()

    async def _make_client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(limits=httpx.Limits(max_connections=64))

    # ---------------------------------------------------------------- entry point
    def handle(self, entry: Any, effects: list[Any], leader: bool,
               writer_id: int | None = None) -> None:
        """Carry out what applying ``entry`` asked of this node; ``writer_id`` is this node's
        term while it leads (the run store orders a term's writes by it)."""
        for effect in effects:
            if isinstance(effect, RunChanged):
                self._on_run_changed(effect.run)
            if not leader:
                continue
            if isinstance(effect, StoreRun):
                self._store_later(effect, writer_id)
            elif isinstance(effect, CallApp):
                asyncio.run_coroutine_threadsafe(self._call_app(effect), self._loop)
            elif isinstance(effect, SendWebhook):
                asyncio.run_coroutine_threadsafe(self._webhook(effect), self._loop)
            elif isinstance(effect, EnqueueReview):
                self._counters.reviews_enqueued.labels(effect.queue).inc()

    def take_confirmations(self) -> dict[str, list] | None:
        with self._lock:
            if not self._stored and not self._outbox_done:
                return None
            stored = sorted(self._stored.items())[:confirmations_max]
            outbox = sorted(self._outbox_done)[:confirmations_max]
            for run_id, _ in stored:
                del self._stored[run_id]
            self._outbox_done.difference_update(outbox)
        return {"stored": [list(x) for x in stored], "outbox": outbox}

    def store_backlog(self) -> int:
        return len(self._pending)

    def close(self) -> None:
        self._running = False
        asyncio.run_coroutine_threadsafe(self._client.aclose(), self._loop).result(timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)

    # ---------------------------------------------------------------- run store
    def _store_later(self, effect: StoreRun, writer_id: int | None) -> None:
        with self._pending_cv:
            while len(self._pending) >= store_queue_runs_max and self._running:
                self._pending_cv.wait(0.5)  # far behind: back-pressure on apply
            self._pending.append((effect, writer_id))
            if len(self._pending) == 1:  # the writer waits only on an empty list
                self._pending_cv.notify()

    def _take_batch(self) -> list[tuple[StoreRun, int | None]]:
        """The oldest pending runs (up to a batch), once some are due; [] after 0.2 s idle."""
        with self._pending_cv:
            if not self._pending:
                self._pending_cv.wait(0.2)
                if not self._pending:
                    return []
            lingering = len(self._pending) < store_batch_runs_max
        if lingering:
            time.sleep(store_linger_s)
        with self._pending_cv:
            batch = self._pending[:store_batch_runs_max]
            del self._pending[:store_batch_runs_max]
            self._pending_cv.notify_all()  # an apply held back by a full list
        return batch

    def _store_writer(self) -> None:
        while self._running:
            batch = self._take_batch()
            if not batch:
                continue
            # One write per run, its newest version, under the term that produced it (a node
            # led again may still hold versions of its earlier term).
            latest: dict[str, tuple[StoreRun, int | None]] = {}
            for e, term in batch:
                seen = latest.get(e.run["run_id"])
                if seen is None or e.run["offset"] >= seen[0].run["offset"]:
                    latest[e.run["run_id"]] = (e, term)
            by_term: dict[int | None, list[RunRecord]] = {}
            for e, term in latest.values():  # records built off the apply thread
                by_term.setdefault(term, []).append(RunRecord.of_fields(record_of(e.run)))
            records = [r for group in by_term.values() for r in group]
            for term, group in sorted(by_term.items(), key=lambda t: -1 if t[0] is None else t[0]):
                if not self._put_until_done(group, term):
                    return  # stopped: unwritten runs are not confirmed (a leader re-drives them)
            self._counters.runs_stored.inc(len(records))
            with self._lock:
                for r in records:
                    self._stored[r.run_id] = max(r.offset, self._stored.get(r.run_id, -1))

    def _put_until_done(self, records: list[RunRecord], writer_id: int | None) -> bool:
        """Write, retrying until it works; False only if the executor stopped first."""
        delay_ms = 50
        while self._running:
            try:
                self._store.put_many(records, writer_id)
                self.store_error = None
                return True
            except Exception as exc:  # noqa: BLE001 - the store is down: retry, never drop
                log.warning("run store write of %d runs failed: %s", len(records), exc)
                self.store_error = f"{type(exc).__name__}: {exc}"
                time.sleep(delay_ms / 1000)
                delay_ms = min(store_retry_ms_max, delay_ms * 2)
        return False

    # ---------------------------------------------------------------- apps and webhooks
    async def _call_app(self, effect: CallApp) -> None:
        url = self._app_urls.get(effect.app)
        if url is None:
            log.warning("no URL for app %r; run %s will time out", effect.app, effect.run_id)
            return
        callback = f"{self._settings.url}/v1/runs/{effect.run_id}/apps/{effect.node_id}"
        body = orjson.dumps({**effect.request, "callback_url": callback})
        headers = {"content-type": "application/json",
                   signing.HEADER: signing.sign(
                       self._settings.app_secrets.get(effect.app, self._settings.app_secret),
                       body, int(time.time() * 1000))}
        try:
            resp = await self._client.post(url, content=body, headers=headers,
                                           timeout=max(0.001, effect.timeout_ms / 1000))
        except httpx.HTTPError as exc:  # the Tick at the deadline takes the default edge
            self._counters.app_calls.labels(effect.app, "error").inc()
            log.info("app %s for run %s failed: %s", effect.app, effect.run_id, exc)
            return
        self._counters.app_calls.labels(effect.app, str(resp.status_code)).inc()
        if resp.status_code != 200:
            return  # 202: the app calls back later
        answer = resp.json()
        result = answer.get("result", answer) if isinstance(answer, dict) else None
        if not isinstance(result, dict):
            return
        payload = entries.encode({"run_id": effect.run_id, "node_id": effect.node_id,
                                  "result": result})
        fut = self._submit(entries.APP_COMPLETED, payload, self._settings.submit_timeout_s)
        try:
            await asyncio.wrap_future(fut)
        except Exception as exc:  # noqa: BLE001 - re-driven or timed out later
            log.info("AppCompleted for %s not applied: %s", effect.run_id, exc)

    async def _webhook(self, effect: SendWebhook) -> None:
        s = self._settings
        secret = self._secrets.get(effect.secret_ref or "")
        if secret is None or not egress.url_allowed(effect.url, s.allowed_url_prefixes):
            # Published before the configuration changed: refused, never sent unsigned or
            # signed with another secret. Confirmed, so no later leader retries it.
            log.error("webhook %s refused: URL %r not allowed or secret_ref %r unknown",
                      effect.effect_id, effect.url, effect.secret_ref)
            self._counters.webhooks.labels("refused").inc()
            with self._lock:
                self._outbox_done.add(effect.effect_id)
            return
        ok = await webhooks.deliver(
            self._client, effect.url, effect.payload, secret=secret,
            idempotency_key=effect.effect_id, attempts_max=s.webhook_attempts_max,
            base_ms=s.webhook_backoff_ms_base, cap_ms=s.webhook_backoff_ms_max)
        self._counters.webhooks.labels("delivered" if ok else "failed").inc()
        with self._lock:
            self._outbox_done.add(effect.effect_id)  # failed after all retries: given up
