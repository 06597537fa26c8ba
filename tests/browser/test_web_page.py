"""The job's web page in a real browser: Debian's headless Chromium driven by Playwright while a
real job runs (tiny task programs: 2 MWMS workers that train; worker-1's first attempt dies, so
the group restarts and the timeline has something to show).

Skipped, with the reason, when Playwright or Chromium is missing (``.ci/browser-setup``
installs Chromium in CI). The screenshot goes to ``$ORCH_TEST_ARTIFACTS`` (default
``test-artifacts/`` in the repository); ``ORCH_UPDATE_DOCS=1`` also writes ``docs/web.png``.
"""

from __future__ import annotations

import os
import shutil
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from orchestrator import api
from tests.conftest import REPO, all_pids, assert_no_process_left

CHROMIUM = os.environ.get("ORCH_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PROGRAM = [sys.executable, "-m", "tests.programs.task"]

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')")
if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
    pytest.skip(f"no Chromium at {CHROMIUM}: run .ci/browser-setup (apt-get install chromium)", allow_module_level=True)


def artefact_dir() -> Path:
    path = Path(os.environ.get("ORCH_TEST_ARTIFACTS", REPO / "test-artifacts"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def browser():
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


def _status_code(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_page_shows_the_job_live_in_chromium(browser, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("TEST_BEHAVIOR", "train:0:0.1")
    monkeypatch.setenv("TEST_BEHAVIOR_worker_1_0", "train:25:0.1:137")  # dies at step 25: a group restart
    handle = api.launch(runs_dir=tmp_path, run_id="web", program=PROGRAM, workers=2, heartbeat_interval_s=0.25,
                        backoff_s=0.5, deadline_s=90, web="127.0.0.1:0", web_linger_s=10, stop_timeout_s=5)
    with handle:
        url = handle.web_url
        base = url.split("/?token=")[0]
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(30_000)

        # a wrong token: the page, the API and /metrics are refused
        assert page.goto(base + "/?token=wrong").status == 401
        assert "wrong token" in page.content()
        assert _status_code(base + "/metrics?token=wrong") == 401
        assert _status_code(base + "/api/status?token=wrong") == 401
        assert _status_code(base + "/metrics") == 401

        response = page.goto(url)
        assert response.status == 200
        # the task rows appear (filled in by the page's script)
        page.wait_for_selector("#tasks tbody tr[data-task='worker-1']")
        assert page.locator("#tasks tbody tr").evaluate_all("rows => rows.map(r => r.dataset.task)") == [
            "worker-0", "worker-1"]
        assert page.locator("#tasks thead th").all_inner_texts() == [
            "task", "state", "phase", "pid", "step", "epoch", "loss", "ex/s", "cpu%", "rss MB", "restarts", "beat"]

        # the step advances without a reload
        page.wait_for_function("() => parseInt(document.querySelector(\"tr[data-task='worker-0'] td.c-step\")"
                               "?.textContent) > 0")
        step = int(page.locator("tr[data-task='worker-0'] td.c-step").inner_text())
        navigations = page.evaluate("performance.getEntriesByType('navigation').length")
        page.wait_for_function(f"() => parseInt(document.querySelector(\"tr[data-task='worker-0'] td.c-step\")"
                               f".textContent) > {step}")
        assert page.evaluate("performance.getEntriesByType('navigation').length") == navigations

        # the restart lands on the timeline and in the table, training goes on
        page.wait_for_selector("#timeline .mark.k-restart")
        page.wait_for_function("() => document.querySelector(\"tr[data-task='worker-1'] td.c-restarts\")"
                               ".textContent === '1'")
        page.wait_for_selector("#recoveries li")
        page.wait_for_function("() => parseInt(document.querySelector(\"tr[data-task='worker-1'] td.c-step\")"
                               ".textContent) >= 30")  # attempt 1 is training again

        # the charts are drawn: canvases of non-zero size with one series per task
        for chart in ("#chart-loss", "#chart-eps"):
            box = page.locator(f"{chart} canvas").bounding_box()
            assert box is not None and box["width"] > 100 and box["height"] > 100, chart
        for chart in ("#chart-loss", "#chart-eps"):  # one series per task
            assert page.locator(f"{chart} .u-legend .u-series .u-label").all_inner_texts() == ["worker-0", "worker-1"]
        assert page.locator("#state").inner_text() in ("Running", "Restarting")
        shot = artefact_dir() / "web.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000
        if os.environ.get("ORCH_UPDATE_DOCS") == "1":
            shutil.copy(shot, REPO / "docs" / "web.png")

        # after the end, without a reload: the final state, and the page keeps it
        outcome = handle.stop("stopped by the browser test")
        assert outcome.exit_code == 130
        page.wait_for_function("() => document.querySelector('#state').textContent === 'Interrupted'")
        assert "final state" in page.locator("#conn").inner_text()
        assert page.locator("#facts").inner_text().endswith("stopped by the browser test")
        page.screenshot(path=str(artefact_dir() / "web-ended.png"), full_page=True)
    assert_no_process_left(all_pids(outcome.summary))
