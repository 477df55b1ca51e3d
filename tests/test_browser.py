"""The findings site in a real browser: headless Debian Chromium driven by Playwright.

`make test` installs Debian's chromium first when it is missing (tests/browser/ensure-chromium.sh); this
module skips only when no Chromium could be installed, and says so. Screenshots are kept as test artifacts
in test-artifacts/ (or $GATEKIT_TEST_ARTIFACTS).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import pytest

from gatekit.distribution import install_hint
from tests.conftest import FIXTURES, gate_invoke, make_gate
from tests.fakes import install_fake_machine
from tests.findings_kit import SEED_SECTIONS, hostile_data, variant, write_json

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path(os.environ.get("GATEKIT_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = Path(os.environ.get("GATEKIT_TEST_ARTIFACTS", ROOT / "test-artifacts"))
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]

if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
    pytest.skip(f"no Chromium at {CHROMIUM}: Debian's chromium package is not installed and could not be "
                "installed here (make test runs tests/browser/ensure-chromium.sh, which needs root and apt-get)",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing: "
                               f"{install_hint('test')} (make test does)")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site of four findings: a gate run with its run folders (the fixture trainer played in process on the
    fake machine), a hyperfine import, a related pair, and a hostile finding full of markup."""
    root = tmp_path_factory.mktemp("site")
    g = make_gate(root / "gate", off={"elapsed": {"off-r1": 10.0, "off-r2": 10.1, "off-r3": 9.9}},
                  on={"elapsed": {"on-r1": 9.0, "on-r2": 9.1, "on-r3": 8.9}}, driver={"name": "fake"})
    with pytest.MonkeyPatch.context() as patches:  # a module's fixture: the function-scoped fake_machine cannot
        install_fake_machine(patches)
        done = gate_invoke("run", "off", "on", cwd=g.root)
    assert done.returncode == 0, done.stderr
    findings = g.root / "findings"
    done = gate_invoke("import", "hyperfine", str(FIXTURES / "hyperfine_sleep.json"), "--out", str(findings),
                    "--date", "2026-11-29", cwd=g.root)
    assert done.returncode == 0, done.stderr
    write_json(findings / "older.json", variant("older-2026-11-01", "2026-11-01", delta_pct=3.1,
                                                decision="regression", related=["newer-2026-11-02"]))
    newer = variant("newer-2026-11-02", "2026-11-02", related=["older-2026-11-01"])
    newer["sections"] += SEED_SECTIONS
    write_json(findings / "newer.json", newer)
    write_json(findings / "hostile.json", hostile_data())
    done = gate_invoke("site", "findings", "-o", str(root / "out"), cwd=g.root)
    assert done.returncode == 0, done.stderr
    return root / "out"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        yield chromium
        chromium.close()


class Visit:
    """A page opened from disk, recording every request that is not a local file and every error."""

    def __init__(self, browser: Any, width: int = 1200) -> None:
        self.page = browser.new_page(viewport={"width": width, "height": 900})
        self.outside: list[str] = []
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.page.route("**/*", self._route)
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("console", lambda msg: self.errors.append(msg.text) if msg.type == "error" else None)
        self.page.on("dialog", lambda dialog: (self.dialogs.append(dialog.message), dialog.dismiss()))

    def _route(self, route: Any) -> None:
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            self.outside.append(route.request.url)
            route.abort()

    def open(self, path: Path) -> Any:
        self.page.goto(path.as_uri())
        self.page.wait_for_load_state("load")
        return self.page

    def images(self) -> list[dict[str, Any]]:
        return self.page.eval_on_selector_all(
            "img", "els => els.map(e => ({src: e.getAttribute('src'), complete: e.complete, width: e.naturalWidth}))")

    def close(self) -> None:
        assert not self.outside, f"the page reached outside: {self.outside}"
        assert not self.errors, f"errors in the page: {self.errors}"
        assert not self.dialogs, f"the page opened dialogs: {self.dialogs}"
        self.page.close()


def test_every_page_shows_its_verdict_and_every_image_loads(site: Path, browser: Any) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    pages = sorted(p for p in site.glob("*/index.html"))
    assert len(pages) == 5
    expected = {"regression": "Verdict: REGRESSION", "adopted": "Verdict: ADOPTED"}
    for path in pages:
        visit = Visit(browser)
        page = visit.open(path)
        label = page.text_content(".verdict .callout-label")
        decision = page.get_attribute(".verdict", "data-decision")
        assert label == expected[decision], (path, label)
        assert page.text_content(".verdict p:not(.callout-label)")  # the one-line why
        images = visit.images()
        assert len(images) >= 2, path
        for image in images:
            assert image["complete"] and image["width"] > 0, (path, image)
        if path.parent.name.startswith("fixture-"):  # the gate run: its run folders were found
            # the fake machine records no pressure stall, so no pressure.svg (tests/test_evidence.py draws one)
            assert {i["src"] for i in images} == {"runs.svg", "delta.svg", "load.svg", "ms_per_iter.svg"}
            page.screenshot(path=str(ARTIFACTS / "report-desktop.png"), full_page=True)
        visit.close()


FIRST_SCREEN = {"width": 1280, "height": 800}


def test_the_verdict_its_why_and_the_next_step_are_in_the_first_screen(site: Path, browser: Any) -> None:
    """A reader who does not scroll sees the decision, why (the rule's reason and the noise source) and what to do
    next: each is visible and ends above the fold of a 1280 × 800 window, on every finding's page."""
    pages = sorted(site.glob("*/index.html"))
    for path in pages:
        page = browser.new_page(viewport=FIRST_SCREEN)
        page.goto(path.as_uri())
        page.wait_for_load_state("load")
        verdict = page.locator(".verdict")
        parts = {"verdict": verdict.locator(".callout-label"), "why": verdict.locator("p:not(.callout-label)"),
                 "noise": verdict.locator("li", has_text="Noise: "),
                 "next step": verdict.locator("li", has_text="Next step: ")}
        for name, part in parts.items():
            assert part.count() == 1 and part.is_visible(), (path, name)
            box = part.bounding_box()
            assert box is not None and 0 <= box["y"] and box["y"] + box["height"] <= FIRST_SCREEN["height"], \
                (path, name, box)
        if path.parent.name.startswith("fixture-"):  # the gate run: its windows were sampled
            assert "the machine was quiet during the runs (load1 up to" in parts["noise"].text_content()
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "report-first-screen.png"))
        page.close()


def test_pages_fit_a_phone(site: Path, browser: Any) -> None:
    (path,) = site.glob("fixture-*/index.html")
    visit = Visit(browser, width=390)
    page = visit.open(path)
    # nothing makes the whole page scroll sideways: wide tables and figures scroll inside their own boxes
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    assert page.text_content(".verdict .callout-label") == "Verdict: ADOPTED"
    for image in visit.images():
        assert image["complete"] and image["width"] > 0
    page.screenshot(path=str(ARTIFACTS / "report-phone.png"), full_page=True)
    visit.close()


def test_index_sorts_by_date_and_links_every_page(site: Path, browser: Any) -> None:
    visit = Visit(browser)
    page = visit.open(site / "index.html")
    dates = page.eval_on_selector_all("tbody tr td.date", "els => els.map(e => e.textContent)")
    assert dates == sorted(dates, reverse=True) and len(dates) == 5
    page.screenshot(path=str(ARTIFACTS / "site-index.png"), full_page=True)
    page.click("th:first-child button")
    ascending = page.eval_on_selector_all("tbody tr td.date", "els => els.map(e => e.textContent)")
    assert ascending == sorted(dates)
    assert page.get_attribute("th:first-child", "aria-sort") == "ascending"
    page.click("th:nth-child(4) button")  # Δ, numerically
    deltas = page.eval_on_selector_all("tbody tr td:nth-child(4)", "els => els.map(e => e.getAttribute('data-key'))")
    numbers = [float(d) for d in deltas]
    assert numbers == sorted(numbers)
    hrefs = page.eval_on_selector_all("tbody a", "els => els.map(e => e.getAttribute('href'))")
    for href in hrefs:
        assert (site / href).is_file(), href
    # a related finding's link works in the page too
    page.click("text=Finding newer-2026-11-02")
    page.wait_for_load_state("load")
    page.click("text=older-2026-11-01")
    page.wait_for_load_state("load")
    assert page.text_content(".verdict .callout-label") == "Verdict: REGRESSION"
    visit.close()


def test_hostile_strings_run_no_script(site: Path, browser: Any) -> None:
    (path,) = [p for p in site.glob("golden-*/index.html")]
    for target in (path, site / "index.html"):
        visit = Visit(browser)
        page = visit.open(target)
        page.mouse.move(200, 200)
        for element in page.query_selector_all("td, dd, h1, h2, li, .callout")[:30]:
            element.hover()
        assert page.evaluate("window.__pwned") is None
        if target == path:
            assert "<script>window.__pwned = 1</script>" in page.text_content("h1")
            assert all(i["width"] > 0 for i in visit.images())
        visit.close()


def test_a_bisect_page_shows_its_verdict_loads_its_figure_fits_a_phone_and_runs_no_script(tmp_path: Path,
                                                                                          browser: Any) -> None:
    from gatekit.commits import Commit
    from gatekit.bisect.finding import build_finding, write_bisect_finding
    from gatekit.bisect.records import replay
    from tests.bisect_kit import COMMITS, probe_events, start_event, stop_of, write_events
    from tests.findings_kit import PAYLOAD

    hostile = tuple(Commit(c.sha, f"{PAYLOAD} {c.subject}", c.author_date) for c in COMMITS)
    folder = tmp_path / "bisect"
    journal = write_events(folder, [start_event(commits=hostile, good=hostile[0], bad=hostile[-1]), *probe_events()])
    journal.record(stop_of(folder))
    write_bisect_finding(folder, build_finding(replay(folder)))
    done = gate_invoke("report", str(folder), "--html", str(tmp_path / "html"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for width in (1200, 390):
        visit = Visit(browser, width=width)
        page = visit.open(tmp_path / "html" / "bisect" / "index.html")
        assert page.text_content(".verdict .callout-label") == "CULPRIT FOUND"
        assert page.get_attribute(".verdict", "data-decision") == "culprit"
        assert [(i["src"], i["complete"], i["width"] > 0) for i in visit.images()] == [("bisect.svg", True, True)]
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        for element in page.query_selector_all("td, dd, h1, h2, li, .callout")[:30]:
            element.hover()
        assert page.evaluate("window.__pwned") is None
        assert "<script>window.__pwned = 1</script>" in page.text_content(".verdict")
        if width == 1200:
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "bisect-report.png"), full_page=True)
        visit.close()
