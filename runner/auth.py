"""API keys for client systems and role tokens for console users.

Client systems send ``Authorization: Bearer rk_...``; keys are stored only as SHA-256 hashes in
``<data_dir>/auth.json`` (plus any keys given in ``RAILFLOW_API_KEYS``). Console users log in
with a password (PBKDF2-hashed) and receive ``rt.<JWT>`` (PyJWT, HS256, expiring) carrying
their role; its ``kid`` names the signing secret, so secrets rotate: sign with the current one,
still accept tokens of the ``previous`` ones until they expire. Roles are ordered:
analyst < manager < admin.

Sign-in is throttled on this node (counts are neither shared nor kept across restarts:
docs/security.md says what that guarantees on a cluster): after ``login_failures_max`` failures
in ``login_window_s`` for one user name, or ``login_failures_per_address_max`` from one
address, ``login`` raises ``Throttled`` until the window passes. An unknown user costs the
same PBKDF2 work as a known one, so timing does not tell which names exist.

``principal(bearer)`` is on every request's path: it keeps the principals it resolved in a
cache keyed by the SHA-256 of the bearer, confirmed with ``hmac.compare_digest`` (the cache
never holds a key or token in clear; a hit costs one hash and one dict lookup). A token's
cached principal expires with the token; creating a key or a user clears the cache.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import json
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import jwt

ROLES = ("analyst", "manager", "admin")
token_ttl_s = 12 * 3600
pbkdf2_iterations = 100_000
principals_cached_max = 10_000  # distinct bearers; the cache starts over when full
login_window_s = 300.0
login_failures_max = 5  # per user name and window
login_failures_per_address_max = 20  # per client address and window
login_tracked_max = 10_000  # names and addresses remembered; the oldest are forgotten
_TOKEN_ALGORITHM = "HS256"
_DUMMY_SALT = "railflow-no-such-user"


class Throttled(Exception):
    """Too many failed sign-ins for this user or address; retry after ``retry_after_s``."""

    def __init__(self, retry_after_s: float) -> None:
        super().__init__(f"too many failed sign-ins; retry in {retry_after_s:.0f} s")
        self.retry_after_s = retry_after_s


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


def _token_key(secret: str) -> bytes:
    """A 32-byte HS256 key from a configured secret of any length."""
    return hashlib.sha256(b"railflow console token:" + secret.encode()).digest()


def _kid(secret: bytes) -> str:
    return hashlib.sha256(b"kid:" + secret).hexdigest()[:12]


class _Failures:
    """Failed sign-ins per name within a sliding window (bounded)."""

    def __init__(self) -> None:
        self._times: collections.OrderedDict[str, collections.deque[float]] = (
            collections.OrderedDict())

    def recent(self, name: str, now: float) -> collections.deque[float]:
        times = self._times.get(name)
        if times is None:
            return collections.deque()
        while times and times[0] <= now - login_window_s:
            times.popleft()
        return times

    def add(self, name: str, now: float) -> None:
        times = self._times.setdefault(name, collections.deque())
        self._times.move_to_end(name)
        times.append(now)
        while len(times) > login_failures_per_address_max:
            times.popleft()
        while len(self._times) > login_tracked_max:
            self._times.popitem(last=False)


class AuthStore:
    """Keys and users of one node; the file is written with owner-only permissions."""

    def __init__(self, path: Path | None, token_secret: str, extra_keys: Sequence[str] = (),
                 previous_secrets: Sequence[str] = (),
                 clock: Callable[[], float] = time.monotonic):
        self._path = path
        self._secret = _token_key(token_secret)
        self._verify = {_kid(k): k for k in [self._secret, *map(_token_key, previous_secrets)]}
        self._clock = clock
        self._failed_users = _Failures()
        self._failed_addresses = _Failures()
        self._dummy_hash = _pw_hash(secrets.token_hex(8), _DUMMY_SALT)
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

    def login(self, username: str, password: str, address: str = "") -> str | None:
        """A token, or None for a wrong name or password; raises ``Throttled``."""
        now = self._clock()
        with self._lock:
            for failures, name, limit in (
                    (self._failed_users, username, login_failures_max),
                    (self._failed_addresses, address, login_failures_per_address_max)):
                recent = failures.recent(name, now)
                if len(recent) >= limit:
                    raise Throttled(recent[0] + login_window_s - now)
        user = self._data["users"].get(username)
        salt, want = (user["salt"], user["hash"]) if user else (_DUMMY_SALT, self._dummy_hash)
        ok = hmac.compare_digest(want, _pw_hash(password, salt)) and user is not None
        if not ok:
            with self._lock:
                self._failed_users.add(username, now)
                self._failed_addresses.add(address, now)
            return None
        return self.issue_token(username, user["role"])

    def issue_token(self, username: str, role: str, now_s: float | None = None) -> str:
        now = int(time.time() if now_s is None else now_s)
        claims = {"sub": username, "role": role, "iat": now, "exp": now + token_ttl_s}
        token = jwt.encode(claims, self._secret, algorithm=_TOKEN_ALGORITHM,
                           headers={"kid": _kid(self._secret)})
        return f"rt.{token}"

    def user_for_token(self, token: str, now_s: float | None = None) -> Principal | None:
        if not token.startswith("rt."):
            return None
        raw = token[3:]
        try:
            secret = self._verify.get(jwt.get_unverified_header(raw).get("kid", ""))
            if secret is None:
                return None
            claims = jwt.decode(raw, secret, algorithms=[_TOKEN_ALGORITHM],
                                options={"require": ["exp", "sub"], "verify_exp": False})
        except jwt.PyJWTError:
            return None
        exp, username, role = claims.get("exp"), claims.get("sub"), claims.get("role")
        if not isinstance(exp, int) or exp < (time.time() if now_s is None else now_s):
            return None
        if role not in ROLES or not isinstance(username, str):
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
        """The expiry of a token whose signature was already checked."""
        return float(jwt.decode(token[3:], options={"verify_signature": False})["exp"])
