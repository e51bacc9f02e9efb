"""Runs, review queue, versions, simulate/backtest and metrics in a real browser, plus an edit
done by keyboard only (see conftest.py)."""

from __future__ import annotations

import re

import httpx
from playwright.sync_api import expect

from tests.console.conftest import api_token, check_axe, shot_path, sign_in


def post_order(node, event_id: str, **data) -> dict:
    body = {"event_id": event_id, "type": "order",
            "data": {"card": "c-ui", "customer": "u-ui", "merchant": "m1", "country": "US",
                     "channel": "card-present", "amount": 1_000, **data}}
    r = httpx.post(node["url"] + "/v1/events", json=body,
                   headers={"Authorization": f"Bearer {node['key']}"}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["runs"][0]


def test_post_orders_and_find_a_run_with_its_path(page, node):
    runs = [post_order(node, f"ui-run-{i}", card="c-path", amount=1_000 + i) for i in range(3)]
    sign_in(page, node, "analyst")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Runs").click()
    form = page.get_by_role("form", name="Find runs")
    form.get_by_label("card").fill("c-path")
    form.get_by_label("workflow").fill("w3_demo")  # other tests publish more order workflows
    form.get_by_role("button", name="Find").click()
    table = page.get_by_role("table", name="Runs found")
    expect(table.locator("tbody tr")).to_have_count(3)
    check_axe(page, "runs")
    table.get_by_role("link", name=runs[0]["run_id"]).click()
    expect(page.get_by_test_id("run-outcome")).to_have_text(runs[0]["decision"])
    graph = page.get_by_role("region", name=f"Path of run {runs[0]['run_id']}")
    expect(graph.locator(".wf-node.on-path").first).to_be_visible()
    first = runs[0]["path"][0]
    taken = graph.get_by_test_id(f"edge-{first['node_id']}/{first['edge_id']}")
    expect(taken).to_have_class(re.compile(r"\btaken\b"))
    if first["default_taken"]:
        expect(taken).to_contain_text("default taken")
    tried = first["trace"][0]
    if tried["criteria"]:
        expect(graph.get_by_test_id(f"edge-{first['node_id']}/{tried['edge_id']}")).to_contain_text(
            f"= {str(tried['value']).lower()}")
    expect(page.get_by_role("region", name="Scores")).to_contain_text("payment_abuse")
    expect(page.get_by_role("region", name="Event")).to_contain_text("c-path")
    check_axe(page, "run detail")
    page.screenshot(path=shot_path("run-path.png"), full_page=True)


def test_claim_and_decide_a_review_and_the_run_resumes(page, node):
    run = post_order(node, "ui-review", amount=300_000, country="NG", card="c-rev",
                     customer="u1", channel="card-not-present")
    assert run["waiting_for"] == "review"
    sign_in(page, node, "analyst")  # analysts land on the review queue
    queue = page.get_by_role("table", name="Pending reviews")
    claim = queue.get_by_role("button", name=f"Claim {run['run_id']}")
    claim.click(timeout=20_000)
    expect(page.get_by_role("status").filter(has_text=f"Claimed {run['run_id']}")).to_be_visible()
    expect(queue).to_contain_text("analyst, until")
    task = page.get_by_role("region", name="Task")
    expect(task).to_contain_text("payment_abuse")
    check_axe(page, "review queue")
    page.screenshot(path=shot_path("review-queue.png"), full_page=True)
    decide = page.get_by_role("form", name="Decide")
    decide.get_by_label("accept").check()
    decide.get_by_label("Reason").fill("customer confirmed by phone")
    decide.get_by_role("button", name="Decide").click()
    expect(page.get_by_role("status").filter(has_text="→ approve")).to_be_visible()
    resumed = httpx.get(f"{node['url']}/v1/runs/{run['run_id']}",
                        headers={"Authorization": f"Bearer {node['key']}"}).json()
    assert resumed["state"] == "decided" and resumed["decision"] == "approve"
    assert resumed["apps"]["review"]["reason"] == "customer confirmed by phone"


def _publish(node, wf, headers, create=False):
    url = node["url"] + "/v1/workflows"
    if create:
        assert httpx.post(url, json=wf, headers=headers).status_code == 201
    else:
        assert httpx.put(f"{url}/{wf['id']}/draft", json=wf, headers=headers).status_code == 200
    r = httpx.post(f"{url}/{wf['id']}/publish", headers=headers)
    assert r.status_code == 200, r.text
    return r.json()["version"]


def test_see_the_diff_on_the_graph_and_roll_back(page, node):
    headers = api_token(node, "manager")
    wf = httpx.get(node["url"] + "/v1/workflows/w3_demo/versions/1", headers=headers).json()
    wf["id"] = "w_diff"
    event = next(n for n in wf["nodes"] if n["id"] == "event")
    assert _publish(node, wf, headers, create=True) == 1
    event["edges"].insert(0, {"id": "big_refund", "to": "hold_refund",
                              "criteria": "event.amount > 100000", "default": False})
    wf["nodes"].append({"kind": "decision", "id": "hold_refund", "action": "hold",
                        "reason": "large refund"})
    assert _publish(node, wf, headers) == 2

    sign_in(page, node, "manager")
    page.goto(node["url"] + "/console/workflows/w_diff/versions")
    summary = page.get_by_test_id("diff-summary")
    expect(summary).to_contain_text("node hold_refund added")
    expect(summary).to_contain_text("event.amount > 100000")
    graph = page.get_by_role("region", name="Diff from v1 to v2")
    expect(graph.get_by_test_id("node-hold_refund")).to_have_class(
        re.compile("mark-added"))
    expect(graph.get_by_test_id("edge-event/big_refund")).to_contain_text("added")
    check_axe(page, "versions")
    page.screenshot(path=shot_path("diff-on-graph.png"), full_page=True)
    page.get_by_role("button", name="Roll back to v1").click()
    expect(page.get_by_role("status")).to_contain_text("version 3 has the content of version 1")
    versions = httpx.get(node["url"] + "/v1/workflows/w_diff/versions", headers=headers).json()
    assert [v["version"] for v in versions] == [1, 2, 3]
    v3 = httpx.get(node["url"] + "/v1/workflows/w_diff/versions/3", headers=headers).json()
    assert "hold_refund" not in [n["id"] for n in v3["nodes"]]


def _tab_to(page, js_predicate: str, presses_max: int = 120) -> None:
    for _ in range(presses_max):
        page.keyboard.press("Tab")
        js = f"() => {{ const el = document.activeElement; return !!({js_predicate}); }}"
        if page.evaluate(js):
            return
    raise AssertionError(f"Tab never reached {js_predicate}")


def test_an_edit_by_keyboard_only(page, node):
    headers = api_token(node, "manager")
    wf = httpx.get(node["url"] + "/v1/workflows/w3_demo/versions/1", headers=headers).json()
    wf["id"] = "w_keys"
    assert httpx.post(node["url"] + "/v1/workflows", json=wf, headers=headers).status_code == 201
    sign_in(page, node, "manager")
    page.goto(node["url"] + "/console/workflows/w_keys")
    expect(page.get_by_test_id("node-event")).to_be_visible()
    _tab_to(page, "el.closest('nav[aria-label=Nodes]') "
                  "&& el.textContent.startsWith('block_velocity')")
    page.keyboard.press("Enter")
    # selecting re-creates the graph's nodes; each keeps its measure and stays shown
    selected = page.get_by_test_id("node-block_velocity")
    expect(selected).to_have_class(re.compile(r"\bselected\b"))
    expect(selected).to_be_visible()
    expect(page.get_by_test_id("node-event")).to_be_visible()
    _tab_to(page, "el.tagName === 'INPUT' && el.closest('label')?.textContent.startsWith('Reason')")
    page.keyboard.press("Control+A")
    page.keyboard.type("velocity: typed without a mouse")
    page.keyboard.press("Control+s")
    expect(page.get_by_role("status").filter(has_text="Draft saved")).to_be_visible()
    draft = httpx.get(node["url"] + "/v1/workflows/w_keys/draft", headers=headers).json()
    node_ = next(n for n in draft["definition"]["nodes"] if n["id"] == "block_velocity")
    assert node_["reason"] == "velocity: typed without a mouse"


def test_backtest_shows_change_counts_and_simulate_lights_the_path(page, node):
    for i in range(4):
        post_order(node, f"ui-bt-{i}", card=f"c-bt-{i}", amount=2_000 + i)
    sign_in(page, node, "manager")
    page.goto(node["url"] + "/console/workflows/w3_demo")
    outline = page.get_by_role("navigation", name="Nodes")
    outline.get_by_role("button", name="approve decision", exact=True).click()
    inspector = page.get_by_role("complementary", name="Inspector")
    inspector.get_by_label("Action").select_option("block")
    page.get_by_role("button", name="Save draft").click()
    expect(page.get_by_role("status").filter(has_text="Draft saved")).to_be_visible()
    page.get_by_role("button", name="Simulate & backtest").click()
    tryp = page.get_by_role("region", name="Try the draft")
    tryp.get_by_role("button", name="Simulate").click()
    expect(tryp.get_by_test_id("sim-outcome")).to_contain_text("block")
    # The walk's nodes carry the on-path mark (the graph may still hide nodes it is measuring).
    on_path = re.compile(r"\bon-path\b")
    for node_id in ("event", "score", "approve"):
        expect(page.get_by_test_id(f"node-{node_id}")).to_have_class(on_path)
    expect(page.get_by_test_id("node-block_high_score")).not_to_have_class(on_path)
    tryp.get_by_role("button", name="Backtest").click()
    result = tryp.get_by_test_id("backtest")
    expect(result).to_contain_text("runs change decision against v1")
    changed = int(result.locator("p strong").first.inner_text())
    assert changed >= 4
    expect(result.locator("tr.changed").filter(has_text="approve")).to_have_count(1)
    check_axe(page, "simulate and backtest")


def test_metrics_page_shows_syntax_errors_and_readers(page, node):
    sign_in(page, node, "manager")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Metrics").click()
    table = page.get_by_role("table", name="Metrics")
    row = table.get_by_role("row", name=re.compile(r"^card_count_5m "))
    expect(row).to_contain_text("w3_demo")
    form = page.get_by_role("form", name="Define metrics")
    form.get_by_label("Metric language").fill("SELECT nonsense")
    form.get_by_role("button", name="Define").click()
    expect(form.get_by_role("alert")).to_contain_text("text")
    check_axe(page, "metrics")
    form.get_by_label("Metric language").fill(
        "SELECT COUNT(*) AS ip_count_1h FROM payments GROUP BY ip RANGE 1 HOURS")
    form.get_by_role("button", name="Define").click()
    expect(table).to_contain_text("ip_count_1h")
    expect(table.get_by_role("button", name="Drop ip_count_1h")).to_have_count(0)  # admin only
    page.get_by_role("button", name="Sign out").click()
    sign_in(page, node, "admin")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Metrics").click()
    expect(table.get_by_role("button", name="Drop card_count_5m")).to_be_disabled()  # read
    table.get_by_role("button", name="Drop ip_count_1h").click()
    expect(page.get_by_role("status").filter(has_text="Dropped ip_count_1h")).to_be_visible()
    expect(table).not_to_contain_text("ip_count_1h")
