"""The Prefect UI in a real browser (headless Chromium, `apt-get install chromium`, driven by playwright) after a
demo flow run against a real Prefect server: the run, its progress, releases and budget artifacts and the ε-spent
picture are visible, and no private text is on the pages (scripts/ui_screenshot.py does the same for the docs)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a Prefect server, a flow run and a browser: about half a minute

REPO = Path(__file__).resolve().parents[2]


def _ui_script():
    spec = importlib.util.spec_from_file_location("ui_screenshot", REPO / "scripts" / "ui_screenshot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def ui():
    pytest.importorskip("playwright", reason="the browser test needs playwright (the test extra)")
    module = _ui_script()
    if not Path(module.CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the browser test: no Chromium at {module.CHROMIUM} (apt-get install chromium)")
        pytest.skip(f"no Chromium at {module.CHROMIUM} (apt-get install chromium)")
    return module


def _private_snippets() -> list[str]:
    """Distinctive pieces of every private and query text of the demo (the first 40 characters of each)."""
    from dpicl.demo.run import data_file

    texts = []
    for name, field in (("private_tickets.jsonl", "ticket"), ("backlog.jsonl", "ticket")):
        for line in data_file(name).read_text(encoding="utf-8").splitlines():
            texts.append(json.loads(line)[field][:40])
    return texts


def test_the_ui_shows_the_run_its_progress_releases_budget_and_spend_picture(ui, tmp_path):
    with ui.demo_run_on_server(tmp_path, queries=6, fake_models=True) as url, ui.browser_page() as page:
        assert ui.open_artifacts(page, url, wait_text="spend-demo-tickets")
        listing = page.inner_text("body")
        assert "Completed" in listing and "answer_backlog" in listing
        for key in ("progress-demo-backlog", "releases-demo-backlog", "budget-demo-tickets", "spend-demo-tickets"):
            assert key in listing, key

        def open_artifact(key: str, shows: str) -> str:
            assert ui.open_artifacts(page, url, wait_text=key)
            page.get_by_text(key).first.click()
            page.locator(shows).first.wait_for(timeout=30_000)
            return page.inner_text("body")

        releases = open_artifact("releases-demo-backlog", "text=share_of_budget")
        assert "answered" in releases and "%" in releases
        budget = open_artifact("budget-demo-tickets", "text=queries still payable")
        open_artifact("spend-demo-tickets", "img[src^='data:image/png']")
        image = page.locator("img[src^='data:image/png']").first
        assert page.evaluate("(img) => img.complete && img.naturalWidth > 0", image.element_handle())

    for shown in (listing, releases, budget):
        assert not any(snippet in shown for snippet in _private_snippets())


def test_the_ui_of_a_served_database_logs_in_with_dpicl_and_the_token_not_the_token_alone(ui, tmp_path):
    """`dpicl serve` requires its token on every API call; the UI's login box takes `dpicl:<token>` (what serve now
    prints), and refuses the token alone."""
    from dpicl.serve import TOKEN_USER, auth_string, start_server

    token = "a-token-for-this-test-only"
    server = start_server("127.0.0.1", ui._free_port(), tmp_path / "prefect-home", auth=auth_string(token))
    try:
        with ui.browser_page() as page:
            page.goto(server.ui_url, wait_until="networkidle", timeout=60_000)
            box = page.locator("input[type=password]")
            box.wait_for(timeout=30_000)
            box.fill(token)
            page.get_by_role("button", name="Login").click()
            page.wait_for_timeout(3000)  # the answer to the login's auth check
            assert "/login" in page.url and box.is_visible()  # the token alone is refused
            box.fill(f"{TOKEN_USER}:{token}")
            page.get_by_role("button", name="Login").click()
            page.wait_for_url("**/dashboard**", timeout=30_000)
            page.get_by_text("Dashboard").first.wait_for(timeout=30_000)
            assert "/login" not in page.url
    finally:
        server.stop()
