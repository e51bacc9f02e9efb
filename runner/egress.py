"""Which outside URLs the runner may call, and with which secret.

Webhook URLs come from workflows (written by console users) and app URLs from configuration;
both must match ``RAILFLOW_ALLOWED_URL_PREFIXES``, so a workflow cannot make the leader call
internal addresses. A prefix matches on scheme, host and port exactly and on the path as a
prefix (``https://hooks.example.com/rf`` allows ``https://hooks.example.com/rf/x`` but not
``https://hooks.example.com.evil.net/rf``). A webhook's ``secret_ref`` must name a configured
secret (``RAILFLOW_WEBHOOK_SECRETS``); there is no fallback to another secret.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit


def _parts(url: str) -> tuple[str, str, int | None, str] | None:
    try:
        u = urlsplit(url)
        port = u.port
    except ValueError:
        return None
    if u.scheme not in ("http", "https") or not u.hostname or u.username or u.password:
        return None
    return u.scheme, u.hostname.lower(), port or (443 if u.scheme == "https" else 80), u.path


def url_allowed(url: str, prefixes: Iterable[str]) -> bool:
    got = _parts(url)
    if got is None:
        return False
    for prefix in prefixes:
        want = _parts(prefix)
        if want is None or got[:3] != want[:3]:
            continue
        path = want[3].rstrip("/")
        if got[3] == path or got[3].startswith(path + "/") or not path:
            return True
    return False


def workflow_problems(definition: dict[str, Any], prefixes: Iterable[str],
                      secret_refs: Iterable[str]) -> list[tuple[str, str]]:
    """(field, message) for each webhook node whose URL or secret_ref is not allowed."""
    prefixes, refs = list(prefixes), set(secret_refs)
    out = []
    for node in definition.get("nodes") or []:
        if not isinstance(node, dict) or node.get("kind") != "webhook":
            continue
        where = f"nodes.{node.get('id')}"
        url = node.get("url")
        if not isinstance(url, str) or not url_allowed(url, prefixes):
            out.append((f"{where}.url", f"{url!r} is not under an allowed URL prefix "
                        "(RAILFLOW_ALLOWED_URL_PREFIXES)"))
        if node.get("secret_ref") not in refs:
            out.append((f"{where}.secret_ref", f"no configured secret named "
                        f"{node.get('secret_ref')!r} (RAILFLOW_WEBHOOK_SECRETS)"))
    return out
