"""API keys, console roles, HMAC signatures, webhook retries and the demo score."""

import random

import httpx
import pytest

from runner import auth, signing, webhooks
from runner.auth import AuthStore
from runner.scoring import demo_score


def test_api_keys_are_stored_hashed_and_survive_reload(tmp_path):
    store = AuthStore(tmp_path / "auth.json", "s")
    key = store.create_key("demo")
    assert key not in (tmp_path / "auth.json").read_text()
    again = AuthStore(tmp_path / "auth.json", "s")
    assert again.principal(key).kind == "client"
    assert again.principal(key + "x") is None


def test_console_roles_and_tokens(tmp_path):
    store = AuthStore(None, "secret")
    store.create_user("ann", "pw", "manager")
    assert store.login("ann", "wrong") is None
    user = store.principal(store.login("ann", "pw"))
    assert user.has_role("analyst") and user.has_role("manager") and not user.has_role("admin")
    forged = AuthStore(None, "other").issue_token("ann", "admin")
    assert store.principal(forged) is None
    expired = store.issue_token("ann", "admin", now_s=0)
    assert store.principal(expired) is None


def test_principals_are_cached_by_digest_and_tokens_expire_from_the_cache(tmp_path):
    store = AuthStore(tmp_path / "auth.json", "s")
    key = store.create_key("client-a")
    first = store.principal(key)
    assert first.kind == "client" and store.principal(key) is first  # served from the cache
    assert key not in repr(store._cache) and store.principal(key + "x") is None
    assert len(store._cache) == 1  # unknown bearers are not cached
    store.create_user("ann", "pw", "analyst")
    assert store._cache == {}  # a new key or user starts the cache over
    token = store.issue_token("ann", "analyst", now_s=1_000)
    exp = 1_000 + auth.token_ttl_s
    assert store.principal(token, now_s=exp - 1).name == "ann"
    assert store.principal(token, now_s=exp + 1) is None  # cached, yet expired
    other = AuthStore(None, "other-secret")
    assert other.principal(token, now_s=1_001) is None


def test_tokens_are_jwts_and_secrets_rotate(tmp_path):
    import jwt

    old = AuthStore(None, "old-secret")
    token_old = old.issue_token("ann", "manager")
    assert jwt.decode(token_old[3:], options={"verify_signature": False})["sub"] == "ann"
    assert jwt.get_unverified_header(token_old[3:])["alg"] == "HS256"
    rotated = AuthStore(None, "new-secret", previous_secrets=["old-secret"])
    assert rotated.principal(token_old).role == "manager"  # still valid until it expires
    token_new = rotated.issue_token("ann", "manager")
    assert AuthStore(None, "new-secret").principal(token_new).name == "ann"
    assert AuthStore(None, "new-secret").principal(token_old) is None  # old secret retired
    unsigned = "rt." + jwt.encode({"sub": "ann", "role": "admin", "exp": 2**40}, "",
                                  algorithm="none")
    assert rotated.principal(unsigned) is None


def test_sign_in_throttles_per_user_and_per_address():
    from runner import auth as auth_mod

    now = [1000.0]
    store = AuthStore(None, "s", clock=lambda: now[0])
    store.create_user("ann", "pw", "analyst")
    for _ in range(auth_mod.login_failures_max):
        assert store.login("ann", "wrong", "10.0.0.1") is None
    with pytest.raises(auth_mod.Throttled):
        store.login("ann", "pw", "10.0.0.2")  # the right password, but the user is throttled
    now[0] += auth_mod.login_window_s + 1
    assert store.login("ann", "pw", "10.0.0.2") is not None
    for i in range(auth_mod.login_failures_per_address_max):
        assert store.login(f"user-{i}", "x", "10.9.9.9") is None  # spraying many names
    with pytest.raises(auth_mod.Throttled):
        store.login("ann", "pw", "10.9.9.9")
    assert store.login("ann", "pw", "10.0.0.3") is not None


def test_throttling_counts_are_per_node_and_bounded(monkeypatch):
    """What docs/security.md states: each node counts its own failures (on a cluster the
    limits add up), and past ``login_tracked_max`` names the least recently failed is
    forgotten."""
    from runner import auth as auth_mod

    now = [1000.0]
    a, b = (AuthStore(None, "s", clock=lambda: now[0]) for _ in range(2))
    for store in (a, b):
        store.create_user("ann", "pw", "analyst")
    for _ in range(auth_mod.login_failures_max):
        assert a.login("ann", "wrong", "10.0.0.1") is None
    with pytest.raises(auth_mod.Throttled):
        a.login("ann", "wrong", "10.0.0.2")
    assert b.login("ann", "wrong", "10.0.0.2") is None  # another node: not throttled
    monkeypatch.setattr(auth_mod, "login_tracked_max", 3)
    for i in range(3):
        assert a.login(f"other-{i}", "x", f"10.1.0.{i}") is None
    assert a.login("ann", "pw", "10.0.0.3") is not None  # ann's count was pushed out


def test_an_unknown_user_costs_the_same_password_hash(monkeypatch):
    from runner import auth as auth_mod

    store = AuthStore(None, "s")
    store.create_user("ann", "pw", "analyst")
    calls = []
    real = auth_mod._pw_hash
    monkeypatch.setattr(auth_mod, "_pw_hash", lambda pw, salt: calls.append(salt) or real(pw, salt))
    assert store.login("ann", "wrong") is None and store.login("nobody", "wrong") is None
    assert len(calls) == 2  # one PBKDF2 each: timing does not tell which names exist


def test_signature_round_trip_and_tamper():
    body = b'{"a":1}'
    header = signing.sign("k", body, 1000)
    assert signing.verify("k", body, header, now_ms=2000)
    assert not signing.verify("k", body + b" ", header, now_ms=2000)
    assert not signing.verify("other", body, header, now_ms=2000)
    assert not signing.verify("k", body, header, now_ms=1000 + signing.signature_age_ms_max + 1)
    assert not signing.verify("k", body, "garbage", now_ms=2000)


def test_backoff_is_capped_and_grows():
    rng = random.Random(1)
    assert all(webhooks.backoff_ms(1, 100, 1000, rng) <= 100 for _ in range(50))
    assert all(webhooks.backoff_ms(10, 100, 1000, rng) <= 1000 for _ in range(50))
    assert max(webhooks.backoff_ms(4, 100, 10_000, rng) for _ in range(200)) > 400


@pytest.mark.anyio
async def test_webhook_retries_until_success_and_signs():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(503 if len(seen) < 3 else 200)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        ok = await webhooks.deliver(client, "http://x/hook", {"d": 1}, secret="k",
                                    idempotency_key="e1.0", attempts_max=5, base_ms=1, cap_ms=2)
    assert ok and len(seen) == 3
    assert all(r.headers["Idempotency-Key"] == "e1.0" for r in seen)
    assert signing.verify("k", seen[0].content, seen[0].headers[signing.HEADER],
                          now_ms=int(seen[0].headers[signing.HEADER][2:].split(",")[0]))


@pytest.mark.anyio
async def test_webhook_gives_up_on_client_error():
    calls = []

    async with httpx.AsyncClient(transport=httpx.MockTransport(
            lambda r: calls.append(r) or httpx.Response(400))) as client:
        ok = await webhooks.deliver(client, "http://x/", {}, secret="k", idempotency_key="e",
                                    attempts_max=5, base_ms=1, cap_ms=2)
    assert not ok and len(calls) == 1


def test_demo_score_is_deterministic_and_ordered():
    order = {"card": "c1", "device": "d", "merchant": "m", "amount": 5_000, "country": "US"}
    assert demo_score(order) == demo_score(dict(order))
    risky = dict(order, amount=900_000, country="NG", channel="card-not-present")
    assert demo_score(risky) > demo_score(order)
    assert 0 <= demo_score({"amount": "bad"}) <= 100
