"""Sign-in per role and the workflow editor in a real browser (see conftest.py)."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import expect

from tests.console.conftest import api_token, check_axe, shot_path, sign_in


@pytest.mark.parametrize("role", ["analyst", "manager", "admin"])
def test_sign_in_per_role_hides_what_the_role_may_not_do(page, node, role):
    sign_in(page, node, role)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Workflows").click()
    expect(page.get_by_role("link", name="w3_demo")).to_be_visible()
    check_axe(page, "workflows")
    creates = page.get_by_role("form", name="New workflow")
    expect(creates).to_have_count(0 if role == "analyst" else 1)
    page.get_by_role("link", name="w3_demo").click()
    expect(page.get_by_test_id("node-event")).to_be_visible()
    expect(page.get_by_role("button", name="Publish…")).to_have_count(0 if role == "analyst" else 1)
    check_axe(page, "editor")
    # the server enforces what the UI hides
    draft = httpx.get(node["url"] + "/v1/workflows/w3_demo/versions/1",
                      headers=api_token(node, role)).json()
    r = httpx.put(node["url"] + "/v1/workflows/w3_demo/draft", json=draft,
                  headers=api_token(node, role))
    assert r.status_code == (403 if role == "analyst" else 200), r.text
    me = httpx.get(node["url"] + "/v1/auth/me", headers=api_token(node, role)).json()
    assert me == {"name": role, "kind": "user", "role": role}


def test_build_a_workflow_see_the_error_on_its_edge_fix_it_and_publish_v2(page, node):
    sign_in(page, node, "manager")
    new = page.get_by_role("form", name="New workflow")
    new.get_by_label("Id").fill("w_console")
    new.get_by_role("button", name="Create").click()
    expect(page.get_by_test_id("node-approve")).to_be_visible()
    expect(page.get_by_text("No problems: this draft can be published.")).to_be_visible()

    toolbar = page.get_by_role("toolbar", name="Editor")
    toolbar.get_by_label("Kind").select_option("decision")
    toolbar.get_by_label("Id").fill("block_big")
    toolbar.get_by_role("button", name="Add node").click()
    inspector = page.get_by_role("complementary", name="Inspector")
    inspector.get_by_label("Action").select_option("block")
    page.get_by_role("navigation", name="Nodes").get_by_role("button", name="event").click()
    inspector.get_by_label("New edge to").select_option("block_big")
    inspector.get_by_role("button", name="Add edge").click()
    edge = page.get_by_test_id("edge-event/event_to_block_big")
    expect(edge).to_contain_text("a non-default edge needs criteria")

    crit = page.get_by_test_id("criteria-event_to_block_big")
    crit.click()
    page.keyboard.type("event.am")  # completion offers what is known at this edge
    expect(page.locator(".cm-tooltip-autocomplete")).to_contain_text("amount")
    page.keyboard.press("Escape")
    page.keyboard.type('ount > "big"')
    expect(edge).to_contain_text("cannot order int > string", timeout=5000)
    expect(edge.locator("mark.err-span")).to_have_text('event.amount > "big"')
    expect(page.get_by_role("region", name="Problems")).to_contain_text("criteria_type")
    check_axe(page, "editor with a type error")
    page.mouse.move(700, 860)
    page.screenshot(path=_shot("editor-type-error.png"))

    crit.click()
    page.keyboard.press("Control+A")
    page.keyboard.type("event.amount > 500000")
    expect(edge).not_to_contain_text("cannot order", timeout=5000)
    expect(page.get_by_text("No problems: this draft can be published.")).to_be_visible()
    # the new edge is tried first, the default edge last
    expect(edge.locator(".edge-order")).to_have_text("1")
    expect(page.get_by_test_id("edge-event/to_approve").locator(".edge-order")).to_have_text(
        "default")

    page.get_by_role("button", name="Publish…").click()
    dialog = page.get_by_role("dialog", name="Publish w_console")
    expect(dialog).to_contain_text("First version")
    check_axe(page, "publish dialog")
    dialog.get_by_role("button", name="Publish version 1").click()
    expect(page.get_by_role("status").filter(has_text="Published version 1")).to_be_visible()

    inspector.get_by_role("button", name="Move event_to_block_big down").wait_for(state="attached")
    page.get_by_role("navigation", name="Nodes").get_by_role("button", name="block_big").click()
    inspector.get_by_label("Reason").fill("amount over 5000.00")
    page.get_by_role("button", name="Publish…").click()
    dialog = page.get_by_role("dialog", name="Publish w_console")
    expect(dialog.get_by_test_id("diff-summary")).to_contain_text("node block_big: reason changed")
    dialog.get_by_role("button", name="Publish version 2").click()
    expect(page.get_by_role("status").filter(has_text="Published version 2")).to_be_visible()

    versions = httpx.get(node["url"] + "/v1/workflows/w_console/versions",
                         headers=api_token(node, "manager")).json()
    assert [v["version"] for v in versions] == [1, 2]
    v2 = httpx.get(node["url"] + "/v1/workflows/w_console/versions/2",
                   headers=api_token(node, "manager")).json()
    event = next(n for n in v2["nodes"] if n["id"] == "event")
    assert [(e["id"], e["criteria"]) for e in event["edges"]] == [
        ("event_to_block_big", "event.amount > 500000"), ("to_approve", None)]


def test_undo_redo_and_a_stale_draft_answers_409(page, node):
    sign_in(page, node, "manager")
    headers = api_token(node, "manager")
    wf = httpx.get(node["url"] + "/v1/workflows/w3_demo/versions/1", headers=headers).json()
    wf["id"] = "w_conflict"
    assert httpx.post(node["url"] + "/v1/workflows", json=wf, headers=headers).status_code == 201
    page.goto(node["url"] + "/console/workflows/w_conflict")
    outline = page.get_by_role("navigation", name="Nodes")
    outline.get_by_role("button", name="approve decision", exact=True).click()
    inspector = page.get_by_role("complementary", name="Inspector")
    reason = inspector.get_by_label("Reason")
    before = reason.input_value()
    reason.fill("edited in the console")
    page.keyboard.press("Control+z")
    expect(reason).to_have_value(before)
    page.keyboard.press("Control+Shift+z")
    expect(reason).to_have_value("edited in the console")
    # someone else saves meanwhile: our save answers 409 and offers to reload
    wf["name"] = "changed elsewhere"
    assert httpx.put(node["url"] + "/v1/workflows/w_conflict/draft", json=wf,
                     headers=headers).status_code == 200
    page.get_by_role("button", name="Save draft").click()
    expect(page.get_by_role("alert").filter(has_text="409")).to_be_visible()
    page.get_by_role("button", name="Reload their draft").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("changed elsewhere")


def _shot(name: str) -> str:
    return shot_path(name)


def test_edge_order_changed_by_drag_keeps_the_default_last(page, node):
    headers = api_token(node, "manager")
    wf = httpx.get(node["url"] + "/v1/workflows/w3_demo/versions/1", headers=headers).json()
    wf["id"] = "w_drag"
    assert httpx.post(node["url"] + "/v1/workflows", json=wf, headers=headers).status_code == 201
    score = next(n for n in wf["nodes"] if n["id"] == "score")
    ids = [e["id"] for e in score["edges"] if not e["default"]]
    default = next(e["id"] for e in score["edges"] if e["default"])
    assert len(ids) >= 3
    sign_in(page, node, "manager")
    page.goto(node["url"] + "/console/workflows/w_drag")
    page.get_by_role("navigation", name="Nodes").get_by_role(
        "button", name="score score", exact=True).click()
    last = page.get_by_test_id(f"edge-row-score/{ids[-1]}").locator(".edge-order")
    last.drag_to(page.get_by_test_id(f"edge-row-score/{ids[0]}").locator(".edge-order"))
    moved = page.get_by_test_id(f"edge-score/{ids[-1]}")
    expect(moved.locator(".edge-order")).to_have_text("1")
    expect(page.get_by_test_id(f"edge-score/{default}").locator(".edge-order")).to_have_text(
        "default")
    page.get_by_role("button", name="Save draft").click()
    expect(page.get_by_role("status").filter(has_text="Draft saved")).to_be_visible()
    draft = httpx.get(node["url"] + "/v1/workflows/w_drag/draft", headers=headers).json()
    saved = next(n for n in draft["definition"]["nodes"] if n["id"] == "score")
    assert [e["id"] for e in saved["edges"]] == [ids[-1], *ids[:-1], default]
