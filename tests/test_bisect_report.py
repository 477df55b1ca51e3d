"""`gate report` of a bisect: the page rendered from a journal the test writes, read back by parsing its HTML."""

from __future__ import annotations

import html.parser
import json
import math
from pathlib import Path
from xml.etree import ElementTree

import pytest

from gatekit.bisect.finding import BisectFinding, build_finding, finding_paths, write_bisect_finding
from gatekit.bisect.records import BisectStop, replay
from gatekit.bisect.report import bisect_report_files
from gatekit.bisect.search import Outcome
from gatekit.commits import Commit
from tests.bisect_kit import COMMITS, N, probe_events, start_event, stop_of, write_events, write_example
from tests.conftest import gate_invoke
from tests.findings_kit import PAYLOAD


class Page(html.parser.HTMLParser):
    """The parts of a page a reader sees: the verdict box, each table's rows of cell texts, images, texts."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attributes: set[str] = set()
        self.verdicts: list[dict[str, str | None]] = []
        self.verdict_text: list[str] = []
        self.tables: list[list[list[str]]] = []
        self.images: list[str | None] = []
        self.texts: list[str] = []
        self._in_verdict = 0
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        found = dict(attrs)
        self.attributes |= set(found)
        if tag == "aside" and found.get("role") == "status":
            self.verdicts.append(found)
            self._in_verdict = 1
        elif tag == "aside" and self._in_verdict:
            self._in_verdict += 1
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "img":
            self.images.append(found.get("src"))

    def handle_endtag(self, tag: str) -> None:
        if tag == "aside" and self._in_verdict:
            self._in_verdict -= 1
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        self.texts.append(data)
        if self._in_verdict:
            self.verdict_text.append(data)
        if self._cell is not None:
            self._cell.append(data)

    def table_with(self, header: str) -> list[list[str]]:
        return next(t for t in self.tables if t and header in t[0])


@pytest.fixture
def bisect(tmp_path: Path) -> Path:
    folder = tmp_path / "bisect-demo"
    write_example(folder)
    write_bisect_finding(folder, build_finding(replay(folder)))
    return folder


def rendered(folder: Path, out: Path, named: Path | None = None) -> tuple[Page, Path]:
    reported = gate_invoke("report", str(named or folder), "--html", str(out), cwd=folder.parent)
    assert reported.returncode == 0, reported.stderr
    index = out / folder.name / "index.html"
    assert f"report: {index}" in reported.stdout
    return Page(index.read_text(encoding="utf-8")), index


def test_the_page_shows_the_culprit_its_effect_every_probe_and_the_skipped_commits(bisect: Path, tmp_path: Path) -> None:
    page, index = rendered(bisect, tmp_path / "html")
    finding = build_finding(replay(bisect))
    culprit = finding.culprit
    assert culprit is not None and finding.culprit_index is not None
    # one verdict box, naming the culprit, its posterior and the effect with its interval
    assert [v.get("data-decision") for v in page.verdicts] == ["culprit"]
    verdict = "".join(page.verdict_text)
    assert "CULPRIT FOUND" in verdict
    assert culprit.sha[:12] in verdict and culprit.subject in verdict and culprit.author_date in verdict
    effect = f"{finding.effect_pct:+.2f} % (95 % CI {finding.ci_low_pct:+.2f} … {finding.ci_high_pct:+.2f} %)"
    assert effect in verdict
    assert finding.culprit_posterior is not None and finding.culprit_posterior > 0.9999
    assert "P > 0.9999 of the posterior" in verdict  # not rounded up to a certainty it is not
    # every probed commit with its runs and values, in the journal's order
    probes = page.table_with("median Δ")
    assert [row[0] for row in probes[1:]] == [str(p.index) for p in finding.probes]
    for row, probe in zip(probes[1:], finding.probes):
        assert row[1] == probe.commit.sha[:12] and row[2] == probe.commit.subject and row[6] == str(probe.runs)
        if probe.values:
            assert row[7] == f"{100 * math.expm1(probe.median_log_diff or 0):+.2f} %"
            assert row[8] == ", ".join(f"{v:.4f}" for v in probe.values)
            assert row[9] == ", ".join(f"{v:.4f}" for v in probe.reference_values)
    # the skipped commits and why
    skipped_rows = next(t for t in page.tables if t[0] == ["#", "commit", "subject", "status", "why"])
    assert [(r[0], r[3], r[4]) for r in skipped_rows[1:]] == [(str(s.index), s.status.value, s.why)
                                                              for s in finding.skipped]
    # the posterior of every commit, the culprit's marked
    posterior = page.table_with("P(culprit)")
    assert [r[0] for r in posterior[1:]] == [str(k) for k in range(1, N + 1)]
    assert [r[3] for r in posterior[1:]] == ["yes" if k == finding.culprit_index else "" for k in range(1, N + 1)]
    # the plot of the metric along the range, beside the page
    assert page.images == ["bisect.svg"]
    figure = ElementTree.fromstring((index.parent / "bisect.svg").read_bytes())  # a standalone SVG, two panels
    assert figure.tag == "{http://www.w3.org/2000/svg}svg" and len(figure.findall("{http://www.w3.org/2000/svg}svg")) == 2


def test_either_twin_names_the_same_page(bisect: Path, tmp_path: Path) -> None:
    by_folder, _ = rendered(bisect, tmp_path / "a")
    for twin in finding_paths(bisect):
        by_file, _ = rendered(bisect, tmp_path / twin.suffix[1:], twin)
        assert by_file.tables == by_folder.tables and by_file.verdict_text == by_folder.verdict_text


def test_an_edited_twin_is_refused(bisect: Path, tmp_path: Path) -> None:
    toml_path, json_path = finding_paths(bisect)
    document = json.loads(json_path.read_text())
    document["culprit_posterior"] = 0.5
    json_path.write_text(json.dumps(document))
    reported = gate_invoke("report", str(toml_path), "--html", str(tmp_path / "html"), cwd=tmp_path)
    assert reported.returncode == 2
    assert f"{toml_path}: differs from its twin {json_path.name}: culprit_posterior" in reported.stderr
    assert not (tmp_path / "html").exists()


def test_a_bisect_page_is_html_only(bisect: Path, tmp_path: Path) -> None:
    reported = gate_invoke("report", str(bisect), "--md", str(tmp_path / "r.md"), cwd=tmp_path)
    assert reported.returncode == 2 and "a bisect finding is rendered alone, as an HTML page" in reported.stderr


def test_every_string_from_the_repository_is_escaped(tmp_path: Path) -> None:
    hostile = tuple(Commit(c.sha, f"{PAYLOAD} {c.subject}", PAYLOAD) for c in COMMITS)
    folder = tmp_path / "hostile"
    events = [start_event(commits=hostile, good=hostile[0], bad=hostile[-1], arm=PAYLOAD, metric=PAYLOAD),
              *probe_events()]
    write_events(folder, events).record(stop_of(folder))
    finding = build_finding(replay(folder))
    assert finding.outcome is Outcome.CULPRIT and finding.culprit is not None and PAYLOAD in finding.culprit.subject
    text = bisect_report_files(finding)["index.html"].decode()
    page = Page(text)
    assert "script" not in page.tags and page.tags.count("img") == 1
    assert not {a for a in page.attributes if a.startswith("on")}, page.attributes
    assert any("window.__pwned = 1" in t for t in page.texts)  # shown as text


def test_a_bisect_that_stopped_at_the_endpoints(tmp_path: Path) -> None:
    write_events(tmp_path, [start_event(), *probe_events()[:2], BisectStop(Outcome.NO_CHANGE, None, (), (), 6, 1, 0)])
    finding: BisectFinding = build_finding(replay(tmp_path))
    page = Page(bisect_report_files(finding)["index.html"].decode())
    assert [v.get("data-decision") for v in page.verdicts] == ["no_change"]
    assert "NO CHANGE" in "".join(page.verdict_text) and len(page.table_with("median Δ")) == 1 + 1
    assert not any(t and t[0][:3] == ["#", "commit", "P(culprit)"] for t in page.tables)  # no posterior to show


def test_endpoints_without_power_are_inconclusive_with_their_mde(tmp_path: Path) -> None:
    write_events(tmp_path, [start_event(floor_pct=1.0, steps_alpha=0.01), *probe_events()[:2],
                            BisectStop(Outcome.INCONCLUSIVE, None, (), (), 6, 1, 0)])
    finding: BisectFinding = build_finding(replay(tmp_path))
    assert finding.floor_pct == 1.0 and finding.endpoints_mde_pct is not None
    assert finding.endpoints_ci_low_pct is not None and finding.endpoints_ci_high_pct is not None
    page = Page(bisect_report_files(finding)["index.html"].decode())
    assert [v.get("data-decision") for v in page.verdicts] == ["inconclusive"]
    text = "".join(page.verdict_text)
    assert "INCONCLUSIVE" in text and "minimum detectable effect" in text
    # the same journal without the plan's checks: a finding as it was written before them (no new keys)
    write_events(tmp_path / "old", [start_event(), *probe_events()[:2], BisectStop(Outcome.NO_CHANGE, None, (), (), 6,
                                                                                1, 0)])
    old = build_finding(replay(tmp_path / "old")).to_dict()
    assert not {"floor_pct", "endpoints_mde_pct", "steps", "steps_p", "jump_p"} & set(old)
