"""The inspector page in a real browser: Debian's chromium, headless, driven by Playwright (its own
browser downloads are never used). It watches a request appear live, opens it, sees the prompt with
the wrapper's markers, the grammar, the raw output of each attempt, the repair and why the first
answer was not accepted, then runs it again with another wrapper and sees both side by side.

``LLMPROXY_UPDATE_SCREENSHOTS=1`` writes the README's screenshots (docs/inspector-*.png) as it goes;
otherwise they go to a temporary folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
from inspector_helpers import ASK, HERMES_CALL, TRAILING_COMMA, scripted_route
from server_helpers import running

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip("browser tests need Debian's chromium: apt-get install -y chromium (.ci/run installs it)",
                allow_module_level=True)
sync_playwright = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]' installs playwright"
                                      ).sync_playwright

KEY = "browser-key"
DOCS = Path(__file__).resolve().parent.parent / "docs"
# A headless browser that reaches nothing but the server under test.
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WAIT_MS = 15_000


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def shots(tmp_path) -> Path:
    return DOCS if os.environ.get("LLMPROXY_UPDATE_SCREENSHOTS") == "1" else tmp_path


def test_watch_a_request_live_open_it_and_run_it_again(browser, shots):
    _, route = scripted_route()
    with running({"m": route}, api_key=KEY, capture=True) as server:
        root = server.base_url.removesuffix("/v1")
        page = browser.new_page(viewport={"width": 1400, "height": 520})
        page.set_default_timeout(WAIT_MS)
        page.goto(f"{root}/inspect?key={KEY}")  # signs in, and lands on /inspect without the key
        assert page.url == f"{root}/inspect"
        page.wait_for_selector("#models tr[data-model='m']")
        assert "chatml-json" in page.inner_text("#models tr[data-model='m']")

        page.click("#nav-requests")
        page.wait_for_selector("#live-state.ok")  # the live feed is open before the request is sent
        sent = httpx.post(server.base_url + "/chat/completions", json=ASK,
                          headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
        assert sent.status_code == 200, sent.text
        row = page.wait_for_selector("tr.request[data-seq='1']")  # appeared without a reload
        assert sent.headers["x-request-id"] in row.inner_text() and "drop_trailing_comma" in row.inner_text()
        with httpx.stream("POST", server.base_url + "/chat/completions", json={**ASK, "stream": True},
                          headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as streamed:
            streamed.read()
        assert "(stream)" in page.wait_for_selector("tr.request[data-seq='2']").inner_text()
        page.screenshot(path=str(shots / "inspector-requests.png"))

        page.click("#nav-overview")
        page.wait_for_selector("#models tr[data-model='m'] td:has-text('2 (')")  # the requests are counted
        page.screenshot(path=str(shots / "inspector-overview.png"))

        page.click("#nav-requests")
        page.click("tr.request[data-seq='1']")
        column = page.wait_for_selector("#columns .column")
        prompt = column.query_selector(".step-prompt")
        assert "user" in prompt.inner_text() and prompt.query_selector("mark.marker").inner_text() == "<|im_start|>"
        column.query_selector(".step-grammar summary").click()
        assert column.query_selector(".step-grammar pre").inner_text().startswith("root ::=")
        raws = [raw.inner_text() for raw in column.query_selector_all(".step-raw pre")]
        assert "fly_to_moon" in raws[0] and raws[1] == TRAILING_COMMA
        verdicts = [verdict.inner_text() for verdict in column.query_selector_all(".verdict")]
        assert verdicts[0].startswith("Not accepted") and "fly_to_moon" in verdicts[0]
        assert "drop_trailing_comma" in verdicts[1]
        assert "drop_trailing_comma" in column.query_selector(".step-repair").inner_text()
        page.screenshot(path=str(shots / "inspector-request.png"), full_page=True)

        page.select_option("#rerun-wrapper", "hermes")
        page.click("#rerun-button")
        page.wait_for_selector("#columns .column:nth-child(2)")
        original, rerun = page.query_selector_all("#columns .column")
        assert "chatml-json" in original.query_selector(".facts").inner_text()
        assert "wrapper hermes" in rerun.query_selector(".facts").inner_text()
        assert rerun.query_selector(".step-raw pre").inner_text() == HERMES_CALL.strip()
        assert rerun.query_selector(".verdict").inner_text().startswith("Accepted")
        assert "<tools>" in [mark.inner_text() for mark in rerun.query_selector_all(".step-prompt mark.marker")]
        page.screenshot(path=str(shots / "inspector-rerun.png"), full_page=True)
        page.close()


def test_without_capture_the_page_shows_metadata_and_says_how_to_see_more(browser):
    _, route = scripted_route()
    with running({"m": route}) as server:
        root = server.base_url.removesuffix("/v1")
        secret = "a secret only the client knows"
        body = {**ASK, "messages": [{"role": "user", "content": secret}]}
        assert httpx.post(server.base_url + "/chat/completions", json=body, timeout=30).status_code == 200
        page = browser.new_page()
        page.set_default_timeout(WAIT_MS)
        page.goto(f"{root}/inspect#request/1")
        column = page.wait_for_selector("#columns .column")
        assert "--capture" in column.inner_text() and "attempts 2" in column.inner_text()
        assert secret not in page.content() and page.query_selector(".step-prompt") is None
        assert page.is_hidden("#rerun-form")
        page.close()
