"""The console in a real browser: Debian's Chromium driven by Playwright against a real
embedded node (file log, RocksDB run store) on a free port, serving the built bundle.

Missing Chromium or a missing bundle fails the tests (``make test`` installs and builds both).
Every page a test visits is checked with axe-core; serious or critical violations fail it.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
import uvicorn

from runner.api.app import create_app
from runner.api.console_static import DIST
from runner.service import Service
from runner.settings import Settings

CHROMIUM = Path("/usr/bin/chromium")
AXE = Path(__file__).resolve().parents[2] / "console" / "node_modules" / "axe-core" / "axe.min.js"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
PASSWORD = "console-pw"
ready_timeout_s = 60
ui_timeout_ms = 15_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="package")
def node(tmp_path_factory):
    """A real embedded node with users analyst, manager, admin and a client key."""
    assert (DIST / "index.html").is_file(), f"console bundle missing at {DIST}: run `make console`"
    port = _free_port()
    settings = Settings(data_dir=tmp_path_factory.mktemp("console-node"), port=port,
                        tick_interval_ms=50, request_deadline_ms_default=2000)
    service = Service(settings)
    key = service.auth.create_key("console-tests")
    for role in ("analyst", "manager", "admin"):
        service.auth.create_user(role, PASSWORD, role)
    server = uvicorn.Server(uvicorn.Config(create_app(service), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + ready_timeout_s
    token = None
    while time.monotonic() < deadline:
        try:
            if token is None:
                r = httpx.post(url + "/v1/auth/token",
                               json={"username": "admin", "password": PASSWORD})
                token = r.json()["access_token"] if r.status_code == 200 else None
            if token and httpx.get(url + "/v1/workflows",
                                   headers={"Authorization": f"Bearer {token}"}).json():
                break  # the demo workflow is published
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    else:
        pytest.fail("the embedded node did not publish the demo workflow in time")
    yield {"url": url, "key": key, "service": service}
    server.should_exit = True
    thread.join(timeout=20)


# Package scope, not session: Playwright's sync API keeps an event loop running in the main
# thread while it is open, which breaks every later asyncio test of the session.
@pytest.fixture(scope="package")
def browser():
    assert CHROMIUM.exists(), "Chromium missing: `make browser` installs Debian's chromium"
    assert AXE.exists(), f"axe-core missing at {AXE}: run `make console`"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    context.set_default_timeout(ui_timeout_ms)
    # Assertions wait as long as actions do (their own default is 5 s): on a loaded 2-core
    # machine React Flow can take longer than that to measure and show the graph's nodes.
    from playwright.sync_api import expect
    expect.set_options(timeout=ui_timeout_ms)
    p = context.new_page()
    yield p
    context.close()


def api_token(node, role: str) -> dict[str, str]:
    r = httpx.post(node["url"] + "/v1/auth/token", json={"username": role, "password": PASSWORD})
    r.raise_for_status()
    return {"Authorization": f"Bearer {r.json()['access_token']}"}


def check_axe(page, where: str) -> None:
    """Fail on serious or critical accessibility violations of the page as it is now."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    result = page.evaluate("() => axe.run(document, {resultTypes: ['violations']})")
    bad = [f"{v['id']} ({v['impact']}): {v['help']} -> "
           + "; ".join(n["target"][0] if isinstance(n["target"][0], str) else str(n["target"])
                       for n in v["nodes"][:3])
           for v in result["violations"] if v["impact"] in ("serious", "critical")]
    assert not bad, f"axe on {where}:\n" + "\n".join(bad)


def shot_path(name: str) -> str:
    """Where a test's screenshot goes: console/docs/ with RAILFLOW_CONSOLE_SHOTS=1 (to refresh
    the committed PNGs), else a scratch directory so a test run leaves the tree clean."""
    import os
    import tempfile

    if os.environ.get("RAILFLOW_CONSOLE_SHOTS") == "1":
        out = Path(__file__).resolve().parents[2] / "console" / "docs"
    else:
        out = Path(tempfile.gettempdir()) / "railflow-console-shots"
    out.mkdir(parents=True, exist_ok=True)
    return str(out / name)


def sign_in(page, node, role: str) -> None:
    page.goto(node["url"] + "/console/signin")
    check_axe(page, "sign-in")
    page.get_by_label("Username").fill(role)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_test_id("role").filter(has_text=role).wait_for()
