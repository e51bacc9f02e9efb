"""What each Sift endpoint does, over one ``Service``: translate, call ``runner.operations``
(the same functions ``/v1/events`` and the review queue call), present.

Nothing here writes state: an event goes through ``operations.receive_event`` (one
``EventReceived`` entry, the same dedup and runs as ``/v1/events``); an analyst's decision on a
waiting review goes through ``operations.decide`` (one ``AppCompleted`` entry that resumes the
run); any other applied decision is recorded as a ``sift_decision`` event in the log.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any
from urllib.parse import quote

import orjson
from pydantic import ValidationError

from runner import operations as ops
from runner.api.models import EventIn
from runner.errors import NotFound, RequestInvalid
from runner.service import Service
from runner.sift import present, translate
from runner.sift.codes import (
    BAD_API_KEY,
    BAD_VALUE,
    MISSING_FIELD,
    OK,
    RATE_LIMITED,
    SiftError,
)
from runner.sift.config import SiftSettings
from runner.sift.ratelimit import RateLimiter
from runner.state import queries

DECISION_SOURCES = ("MANUAL_REVIEW", "AUTOMATED_RULE", "CHARGEBACK")
DECISION_EVENT_TYPE = "sift_decision"
definitions_cached_max = 1_000
decision_page_max = 1_000
runs_per_entity_max = 200


class SiftDoor:
    """The Sift API of one node. ``cfg`` maps Sift's vocabulary (see ``config``)."""

    def __init__(self, svc: Service, cfg: SiftSettings) -> None:
        self.svc = svc
        self.cfg = cfg
        self.limiter = RateLimiter(cfg.rate_limit_per_s, cfg.rate_limit_burst)
        self._definitions: dict[tuple[str, int], dict | None] = {}

    # ------------------------------------------------------------ auth
    def authenticate(self, key: Any, account: str | None = None) -> str:
        """The client's name for a Railflow client key; 51 for anything else; 60 past the
        rate limit."""
        if not isinstance(key, str) or not key:
            raise SiftError(BAD_API_KEY, "no API key", 400)
        principal = self.svc.auth.client_for_key(key)
        if principal is None:
            raise SiftError(BAD_API_KEY, "", 400)
        if account is not None and self.cfg.account_id not in (None, account):
            raise SiftError(BAD_API_KEY, f"the key does not serve account {account}", 400)
        if not self.limiter.allow(key):
            raise SiftError(RATE_LIMITED, "", 429, {"Retry-After": "1"})
        return principal.name

    # ------------------------------------------------------------ events
    async def track(self, raw: bytes, flags: dict[str, Any]) -> dict[str, Any]:
        body = translate.parse_body(raw)
        self.authenticate(body.get("$api_key"))
        sift_type, event = translate.to_event(body, self.cfg)
        try:
            valid = EventIn.model_validate(event)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise SiftError(BAD_VALUE, f"{where}: {err['msg']}") from None
        result = await ops.receive_event(self.svc, valid.model_dump(), None)
        out: dict[str, Any] = {"status": OK, "error_message": "OK", "time": int(time.time())}
        if flags.get("return_score") or flags.get("return_workflow_status") \
                or flags.get("return_action"):
            abuse = flags.get("abuse_types")
            runs = [r for r in result["runs"] if present.wants(r, self.cfg, abuse)]
            score_response: dict[str, Any] = {
                "status": OK, "error_message": "OK",
                "user_id": body.get("$user_id") or body.get("$session_id") or "",
                "scores": present.scores(runs, self.cfg, abuse), "latest_labels": {}}
            if flags.get("return_workflow_status"):
                score_response["workflow_statuses"] = [
                    present.workflow_status(r, self.definition(r), self.cfg, valid.data,
                                            route=bool(flags.get("return_route_info")))
                    for r in runs]
            if flags.get("return_action"):
                score_response["actions"] = []
            out["score_response"] = score_response
        if "WARNINGS" in (flags.get("fields") or []):
            out["warnings"] = {"count": 0, "items": []}
        return out

    # ------------------------------------------------------------ workflow runs
    def definition(self, run: dict) -> dict | None:
        key = (run["workflow_id"], int(run["workflow_version"]))
        if key not in self._definitions:  # a version's content never changes: cache it
            if len(self._definitions) >= definitions_cached_max:
                self._definitions.clear()
            self._definitions[key] = ops._read(self.svc, queries.version_definition, *key)
        return self._definitions[key]

    def workflow_status(self, run_id: str) -> dict[str, Any]:
        try:
            run = ops.get_run(self.svc, run_id)
        except NotFound:
            raise SiftError(BAD_VALUE, f"no workflow run {run_id}", 404,
                            title="Not found") from None
        return present.workflow_status(run, self.definition(run), self.cfg,
                                       self.event_data(run_id))

    def event_data(self, run_id: str) -> dict | None:
        """The run's event data: from the state (flushed or not), else from the run store,
        else None."""
        event = ops.run_event(self.svc, run_id)
        return None if event is None else event.get("data")

    def order_runs(self, order_id: str) -> list[dict]:
        """The runs of one order: those of the events named by the order id (fresh state),
        then any other the run store indexes under the order (e.g. ``$transaction``s)."""
        found: dict[str, dict] = {}
        types = [t for t, f in self.cfg.id_fields.items() if f == "$order_id"]
        for sift_type in [*types, "$transaction"]:
            event_id = translate.event_id_of(sift_type, {"$order_id": order_id}, self.cfg)
            try:
                for run in ops.event_runs(self.svc, event_id):
                    found[run["run_id"]] = run
            except NotFound:
                continue
        for run in self._stored(ops.lookup_runs, "order", order_id):
            found.setdefault(run["run_id"], run)
        return [found[k] for k in sorted(found)]

    def user_runs(self, user_id: str) -> list[dict]:
        return self._stored(ops.lookup_runs, "customer", user_id)

    def _stored(self, lookup, kind: str, value: str) -> list[dict]:
        try:
            return lookup(self.svc, kind, value, runs_per_entity_max)
        except RequestInvalid:  # a value the index cannot hold (e.g. with "/"): none stored
            return []

    # ------------------------------------------------------------ decisions
    async def apply_decision(self, entity: dict[str, str], user_id: str,
                             raw: bytes) -> dict[str, Any]:
        """Apply an analyst's or a rule's decision to an order or a user. ``MANUAL_REVIEW``
        resolves the entity's waiting reviews (their runs resume); the decision is recorded
        as a ``sift_decision`` event otherwise."""
        body = translate.parse_body(raw)
        decision_id = body.get("decision_id")
        if not isinstance(decision_id, str) or not decision_id:
            raise SiftError(MISSING_FIELD, "decision_id")
        source = body.get("source")
        if source not in DECISION_SOURCES:
            raise SiftError(BAD_VALUE, f"source must be one of {list(DECISION_SOURCES)}")
        analyst = body.get("analyst")
        if source == "MANUAL_REVIEW" and (not isinstance(analyst, str) or not analyst):
            raise SiftError(MISSING_FIELD, "analyst (required for MANUAL_REVIEW)")
        at = body.get("time")
        if at is not None and (not isinstance(at, int) or isinstance(at, bool) or at < 0):
            raise SiftError(BAD_VALUE, "time must be milliseconds since the epoch")
        runs = self.order_runs(entity["id"]) if entity["type"] == "order" \
            else self.user_runs(user_id)
        resolved = 0
        if source == "MANUAL_REVIEW":
            resolved = await self._resolve_reviews(runs, decision_id, analyst)
        if not resolved:
            await self._record(entity, user_id, body)
        return {"entity": entity, "decision": {"id": decision_id},
                "time": at if at is not None else int(time.time() * 1000)}

    async def _resolve_reviews(self, runs: list[dict], decision_id: str, analyst: str) -> int:
        resolved = 0
        for stale in runs:
            run = ops.get_run(self.svc, stale["run_id"])  # the store may lag the state
            if run["state"] != "waiting" or run.get("waiting_for") != "review":
                continue
            node = present.nodes_of(self.definition(run)).get(run["node_id"], {})
            outcomes = node.get("outcomes", [])
            outcome = present.review_outcome(decision_id, outcomes, self.cfg)
            if outcome is None:
                raise SiftError(BAD_VALUE, f"decision_id must be one of the review's buttons "
                                           f"{outcomes} (or mapped in decision_outcomes)")
            await ops.decide(self.svc, run["run_id"], run["node_id"], analyst, outcome,
                             override=True)
            resolved += 1
        return resolved

    async def _record(self, entity: dict[str, str], user_id: str, body: dict) -> None:
        digest = hashlib.blake2b(orjson.dumps([entity, user_id, body],
                                              option=orjson.OPT_SORT_KEYS),
                                 digest_size=12).hexdigest()
        name = quote(entity["id"], safe="")[:120]
        data = {"entity_type": entity["type"], "entity_id": entity["id"], "customer": user_id,
                **{k: v for k, v in body.items() if k in (
                    "decision_id", "source", "analyst", "description", "time")}}
        if entity["type"] == "order":
            data["order_id"] = entity["id"]
        event = {"event_id": f"sift.decision.{name}.{digest}", "type": DECISION_EVENT_TYPE,
                 "data": data}
        await ops.receive_event(self.svc, EventIn.model_validate(event).model_dump(), None)

    def order_decisions(self, order_id: str) -> dict[str, Any]:
        return {"decisions": present.latest_decisions(self.order_runs(order_id), self.cfg)}

    def user_decisions(self, user_id: str) -> dict[str, Any]:
        return {"decisions": present.latest_decisions(self.user_runs(user_id), self.cfg)}

    def decision_configs(self, entity_type: str | None, abuse_types: list[str] | None,
                         limit: int, start: int) -> tuple[list[dict], bool]:
        """One page of the decision catalogue and whether more follow."""
        active = []
        for wf in ops._read(self.svc, queries.workflows):
            if wf["active_version"] is None:
                continue
            definition = self.definition({"workflow_id": wf["workflow_id"],
                                          "workflow_version": wf["active_version"]})
            if definition is not None:
                active.append((wf["workflow_id"], definition))
        every = present.decision_configs(active, self.cfg, entity_type, abuse_types)
        limit = min(limit, decision_page_max)
        return every[start:start + limit], start + limit < len(every)
