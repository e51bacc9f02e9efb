"""Forwarding between two leaders of successive terms (two embedded nodes, one cluster
secret): a forward captured on its way to one leader is refused by the next."""

from __future__ import annotations

import time

import orjson
import pytest
from fastapi.testclient import TestClient

from runner import forwarder, operations, signing
from runner.api.app import create_app
from runner.errors import NotFound
from runner.settings import Settings
from runner.state import entries

secret = "forwarding-test-cluster-secret-0123456789"
ready_timeout_s = 60


def _leader(data, epoch_before: int):
    (data / "log").mkdir(parents=True, exist_ok=True)
    (data / "log" / "writer-epoch").write_text(str(epoch_before))  # the node's next term
    app = create_app(settings=Settings(data_dir=data, port=8998, cluster_secret=secret,
                                       demo=False))
    return app


@pytest.fixture(scope="module")
def leaders(tmp_path_factory):
    """Two leaders: the old one (term 1) and its successor (term 5)."""
    old_app = _leader(tmp_path_factory.mktemp("old"), 0)
    new_app = _leader(tmp_path_factory.mktemp("new"), 4)
    with TestClient(old_app) as old, TestClient(new_app) as new:
        for app in (old_app, new_app):
            deadline = time.monotonic() + ready_timeout_s
            while not app.state.service.node.is_leader and time.monotonic() < deadline:
                time.sleep(0.05)
        yield (old, old_app.state.service), (new, new_app.state.service)


def _send(client, body: bytes):
    header = signing.sign(secret, body, int(time.time() * 1000))
    return client.post(forwarder.PATH, content=body, headers={signing.HEADER: header})


def _event(event_id: str) -> bytes:
    return entries.encode({"event_id": event_id, "type": "order", "data": {"amount": 5}})


def test_a_forward_replayed_to_the_next_leader_is_refused(leaders):
    (old, old_svc), (new, new_svc) = leaders
    assert (old_svc.node.my_writer_id, new_svc.node.my_writer_id) == (1, 5)
    body = forwarder.encode_request(entries.EVENT_RECEIVED, _event("fwd-replay"), 5, 1)
    header = signing.sign(secret, body, int(time.time() * 1000))
    r = old.post(forwarder.PATH, content=body, headers={signing.HEADER: header})
    assert r.status_code == 200, r.text
    # The same bytes and signature, captured and sent to the next leader within the window:
    # its seen-set never held the nonce, the term refuses it, and nothing is appended.
    applied_before = new_svc.node.applied_offset
    r = new.post(forwarder.PATH, content=body, headers={signing.HEADER: header})
    assert r.status_code == 409 and r.json() == {
        "error": "WrongTerm", "message": r.json()["message"], "term": 5}
    assert new_svc.node.applied_offset == applied_before
    with pytest.raises(NotFound):
        operations.event_runs(new_svc, "fwd-replay")


def test_a_forward_for_a_later_term_is_refused_too(leaders):
    (old, _), _ = leaders
    body = forwarder.encode_request(entries.EVENT_RECEIVED, _event("fwd-later"), 5, 5)
    assert _send(old, body).status_code == 409


def test_the_forwarder_learns_the_new_leaders_term_and_signs_for_it(leaders):
    (_, old_svc), (new, new_svc) = leaders
    # A follower whose log still names the old leader's term guesses it first.
    fwd = forwarder.HttpForwarder(secret, term_hint=lambda: old_svc.node.my_writer_id,
                                  client=new)
    applied = fwd.forward(str(new.base_url), entries.EVENT_RECEIVED, _event("fwd-learn"), 5)
    assert applied.writer_id == 5 and applied.offset >= 0
    applied = fwd.forward(str(new.base_url), entries.EVENT_RECEIVED, _event("fwd-learn-2"), 5)
    assert applied.writer_id == 5
    assert fwd._terms[str(new.base_url)] == 5


def test_a_forward_with_no_term_is_malformed(leaders):
    (old, _), _ = leaders
    body = orjson.loads(forwarder.encode_request(entries.EVENT_RECEIVED, _event("x"), 5, 1))
    del body["term"]
    assert _send(old, orjson.dumps(body)).status_code == 400
