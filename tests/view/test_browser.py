"""The viewer in a real browser: Playwright driving Debian's Chromium, headless.

Needs ``pip install playwright`` and a Chromium binary (``apt-get install chromium``; never
``playwright install``, whose download is blocked on our machines). The path can be set
with ``PLGUARD_CHROMIUM``. Marked slow: CI runs them with ``--runslow``. Set
``PLGUARD_VIEW_SCREENSHOT=FILE.png`` to save the record page as the README's screenshot.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from plguard_lab.view.app import build_view_app
from plguard_lab.view.export import export_html
from plguard_lab.view.state import ViewState

from .conftest import RUN

pytestmark = pytest.mark.slow

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
TIMEOUT_MS = 20_000  # generous: CI machines are small and shared


def _chromium() -> str:
    for cand in (os.environ.get("PLGUARD_CHROMIUM"), "/usr/bin/chromium",
                 shutil.which("chromium"), shutil.which("chromium-browser")):
        if cand and Path(cand).is_file():
            return cand
    pytest.fail("no Chromium binary: apt-get install -y chromium (or set PLGUARD_CHROMIUM)")


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # asked for with --runslow: a missing tool is a failure, not a skip
        pytest.fail("pip install playwright (and apt-get install chromium; never "
                    "`playwright install`)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=_chromium(), headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = ctx.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    ctx.close()
    assert errors == [], errors  # no script error on any page


@contextlib.contextmanager
def serve(source) -> Iterator[str]:
    """The viewer on a free loopback port, in a thread, for the length of the block."""
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(build_view_app(source), host="127.0.0.1",
                                           port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("viewer server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def _target(state: ViewState):
    """A guarded record and its smallest flip (computed by the server's own code).

    Records where the evaluator disagrees with the guard come first: they make the more
    telling screenshot.
    """
    for key, rec in sorted(state.records.items(), key=lambda kv: kv[1]["disagree"] is not True):
        if rec["method"] != "plguard" or not state.record(key)["whatif"]["available"]:
            continue
        probs = {p["name"]: p["p"] for p in rec["predicates"]}
        w = state.whatif(key, probs)
        if w["smallest_flip"]:
            return key, rec, probs, w
    pytest.fail("no fixture record has a flippable decision")


def test_table_filter_record_and_whatif(page):
    state = ViewState.from_source(RUN)
    key, rec, probs, w = _target(state)
    flip = w["smallest_flip"]
    with serve(RUN) as url:
        page.goto(url + "/")
        n = len(state.records)
        page.get_by_test_id("count").filter(has_text=f"{n} of {n} records").wait_for()

        page.get_by_test_id("filter-method").select_option("plguard")
        guarded = [r for r in state.records.values() if r["method"] == "plguard"]
        page.get_by_test_id("count").filter(has_text=f"{len(guarded)} of {n}").wait_for()
        page.get_by_test_id("filter-label").select_option(rec["label"])
        same = [r for r in guarded if r["label"] == rec["label"]]
        page.get_by_test_id("count").filter(has_text=f"{len(same)} of {n}").wait_for()
        assert page.locator("table.records tbody tr").count() == len(same)
        assert "method=plguard" in page.url  # the filters live in the address

        page.locator(f'tr[data-key="{key}"]').click()
        page.get_by_test_id("record-title").filter(has_text=rec["id"]).wait_for()
        assert page.get_by_test_id("prompt").inner_text() == rec["prompt"]
        assert page.get_by_test_id("final").inner_text() == rec["response"]
        assert page.get_by_test_id("explain-unsafe").is_visible()
        assert page.get_by_test_id("pred-" + rec["predicates"][0]["name"]).is_visible()

        # The what-if panel first replays the recorded probabilities.
        action = page.get_by_test_id("whatif-action")
        page.wait_for_function(
            "a => document.querySelector('[data-testid=whatif-action]')"
            ".getAttribute('data-action') === a", arg=w["decision"]["action"])
        flip_text = page.get_by_test_id("whatif-flip").inner_text()
        assert flip["predicate"] in flip_text and f"{flip['new']:.4f}" in flip_text

        # Move one slider to the computed flip point: rules and decision change at once.
        rule = w["decision"]["strongest_unsafe"][0] if flip["action"] == "refuse" or \
            w["decision"]["action"] == "refuse" else w["decision"]["strongest_over_refusal"][0]
        page.get_by_test_id("slider-" + flip["predicate"]).fill(str(flip["new"]))
        page.wait_for_function(
            "a => document.querySelector('[data-testid=whatif-action]')"
            ".getAttribute('data-action') === a", arg=flip["action"])
        moved = state.whatif(key, {**probs, flip["predicate"]: flip["new"]}, with_flips=False)
        cell = page.get_by_test_id("wi-" + rule).inner_text()
        assert cell.startswith(f"{moved['rules'][rule]:.3f}")
        assert moved["rules"][rule] != pytest.approx(w["rules"][rule], abs=5e-4)
        assert action.inner_text() == flip["action"]

        shot = os.environ.get("PLGUARD_VIEW_SCREENSHOT")
        if shot:
            page.evaluate("window.scrollTo(0, 0)")  # the sticky header belongs at the top
            page.screenshot(path=shot, full_page=True)

        page.get_by_test_id("whatif-reset").click()
        page.wait_for_function(
            "a => document.querySelector('[data-testid=whatif-action]')"
            ".getAttribute('data-action') === a", arg=w["decision"]["action"])

        page.get_by_test_id("back").click()
        page.get_by_test_id("count").filter(has_text=f"{len(same)} of {n}").wait_for()

        page.goto(url + "/#/summary")
        page.get_by_test_id("summary").wait_for()
        assert page.get_by_test_id("report-doc").count() >= 1
        assert page.get_by_test_id("report-doc").first.locator("table").count() >= 1
        imgs = page.locator("[data-testid=summary] img")
        assert imgs.count() >= 1
        page.wait_for_function("() => [...document.querySelectorAll('[data-testid=summary] img')]"
                               ".every(i => i.complete && i.naturalWidth > 0)")


def test_exported_file_opens_and_shows_the_same_record(page, tmp_path):
    state = ViewState.from_source(RUN)
    key, rec, _probs, _w = _target(state)
    out = export_html(state, tmp_path / "run.html")
    page.route("**/*", lambda route: route.abort()
               if not route.request.url.startswith(("file:", "data:")) else route.continue_())
    page.goto(out.resolve().as_uri() + "#/record/" + key.replace("/", "%2F"))
    page.get_by_test_id("record-title").filter(has_text=rec["id"]).wait_for()
    assert page.get_by_test_id("prompt").inner_text() == rec["prompt"]
    assert page.get_by_test_id("final").inner_text() == rec["response"]
    assert page.get_by_test_id("explain-unsafe").is_visible()
    assert "static export" in page.locator("section.card", has_text="What if").inner_text()
    page.goto(out.resolve().as_uri() + "#/summary")
    page.get_by_test_id("summary").wait_for()
    page.wait_for_function("() => [...document.querySelectorAll('[data-testid=summary] img')]"
                           ".every(i => i.complete && i.naturalWidth > 0)")
    page.goto(out.resolve().as_uri() + "#/")
    page.get_by_test_id("filter-method").select_option("plguard")
    assert page.locator(f'tr[data-key="{key}"]').count() == 1


def test_bad_input_is_reported_on_the_page(page, run_copy):
    f = run_copy / "plguard.jsonl"
    lines = f.read_text().splitlines()
    f.write_text("\n".join([lines[0][:50], *lines[1:], json.dumps({"odd": 1})]) + "\n")
    with serve(run_copy) as url:
        page.goto(url + "/")
        banner = page.get_by_test_id("problems")
        banner.filter(has_text="plguard.jsonl:1").wait_for()
        assert f"plguard.jsonl:{len(lines) + 1}" in banner.inner_text()
        n = len(ViewState.from_source(run_copy).records)
        page.get_by_test_id("count").filter(has_text=f"{n} of {n} records").wait_for()
