"""API keys for client systems and role tokens for console users.

Client systems send ``Authorization: Bearer rk_...``; keys are stored only as SHA-256 hashes in
``<data_dir>/auth.json`` (plus any keys given in ``RAILFLOW_API_KEYS``). Console users log in
with a password (PBKDF2-hashed) and receive a signed, expiring token ``rt.<payload>.<mac>``
carrying their role. Roles are ordered: analyst < manager < admin.

``principal(bearer)`` is on every request's path: it keeps the principals it resolved in a
cache keyed by the SHA-256 of the bearer, confirmed with ``hmac.compare_digest`` (the cache
never holds a key or token in clear; a hit costs one hash and one dict lookup). A token's
cached principal expires with the token; creating a key or a user clears the cache.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROLES = ("analyst", "manager", "admin")
token_ttl_s = 12 * 3600
pbkdf2_iterations = 100_000
principals_cached_max = 10_000  # distinct bearers; the cache starts over when full


@dataclass(frozen=True)
class Principal:
    name: str
    kind: str  # client | user
    role: str | None = None  # for users

    def has_role(self, role: str) -> bool:
        return self.kind == "user" and ROLES.index(self.role or "analyst") >= ROLES.index(role)


def _sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


@dataclass(frozen=True)
class _Cached:
    digest: bytes
    principal: Principal
    expires_s: float  # a client key never expires (inf)


def _pw_hash(password: str, salt: str) -> str:
    dk = hashlib.pbkdf2_hmac("sha256", password.encode(), salt.encode(), pbkdf2_iterations)
    return dk.hex()


class AuthStore:
    """Keys and users of one node; the file is written with owner-only permissions."""

    def __init__(self, path: Path | None, token_secret: str, extra_keys: list[str] = ()):
        self._path = path
        self._secret = token_secret.encode()
        self._lock = threading.Lock()
        self._data: dict = {"keys": {}, "users": {}}
        if path is not None and path.exists():
            self._data = json.loads(path.read_text())
        self._extra = {_sha(k): "configured" for k in extra_keys}
        self._cache: dict[bytes, _Cached] = {}

    def _save(self) -> None:
        if self._path is None:
            return
        self._path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._data, indent=1))
        tmp.chmod(0o600)
        tmp.replace(self._path)

    # client keys
    def create_key(self, name: str, key: str | None = None) -> str:
        key = key or "rk_" + secrets.token_urlsafe(24)
        with self._lock:
            self._data["keys"][_sha(key)] = name
            self._save()
            self._cache.clear()
        return key

    def client_for_key(self, key: str) -> Principal | None:
        digest = _sha(key)
        name = self._data["keys"].get(digest) or self._extra.get(digest)
        return Principal(name=name, kind="client") if name else None

    # console users
    def create_user(self, username: str, password: str, role: str) -> None:
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}")
        salt = secrets.token_hex(8)
        with self._lock:
            self._data["users"][username] = {"role": role, "salt": salt,
                                             "hash": _pw_hash(password, salt)}
            self._save()
            self._cache.clear()

    def has_user(self, username: str) -> bool:
        return username in self._data["users"]

    def login(self, username: str, password: str) -> str | None:
        user = self._data["users"].get(username)
        if user is None or not hmac.compare_digest(user["hash"], _pw_hash(password, user["salt"])):
            return None
        return self.issue_token(username, user["role"])

    def issue_token(self, username: str, role: str, now_s: float | None = None) -> str:
        exp = int((time.time() if now_s is None else now_s) + token_ttl_s)
        payload = base64.urlsafe_b64encode(json.dumps([username, role, exp]).encode()).decode()
        mac = hmac.new(self._secret, payload.encode(), hashlib.sha256).hexdigest()[:32]
        return f"rt.{payload}.{mac}"

    def user_for_token(self, token: str, now_s: float | None = None) -> Principal | None:
        try:
            _, payload, mac = token.split(".")
            want = hmac.new(self._secret, payload.encode(), hashlib.sha256).hexdigest()[:32]
            if not hmac.compare_digest(mac, want):
                return None
            username, role, exp = json.loads(base64.urlsafe_b64decode(payload))
        except (ValueError, TypeError):
            return None
        if exp < (time.time() if now_s is None else now_s) or role not in ROLES:
            return None
        return Principal(name=username, kind="user", role=role)

    def principal(self, bearer: str, now_s: float | None = None) -> Principal | None:
        """The client or user a bearer key or token stands for; None when it is unknown."""
        digest = hashlib.sha256(bearer.encode()).digest()
        hit = self._cache.get(digest)
        now = time.time() if now_s is None else now_s
        if hit is not None and hmac.compare_digest(hit.digest, digest) and now < hit.expires_s:
            return hit.principal
        if bearer.startswith("rt."):
            found = self.user_for_token(bearer, now)
            expires_s = self._token_expiry(bearer)
        else:
            found, expires_s = self.client_for_key(bearer), float("inf")
        if found is not None:  # unknown bearers are not cached: they could fill the cache
            if len(self._cache) >= principals_cached_max:
                self._cache.clear()
            self._cache[digest] = _Cached(digest, found, expires_s)
        return found

    @staticmethod
    def _token_expiry(token: str) -> float:
        """The expiry of a token whose MAC was already checked."""
        return float(json.loads(base64.urlsafe_b64decode(token.split(".")[1]))[2])
