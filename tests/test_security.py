"""What a gate file and a trainer can and cannot do: no shell, paths anchored at the gate file, no secrets
in any record, and trainer-supplied strings that reach people escaped."""

from __future__ import annotations

import ast
import html.parser
import re
import json
import tomllib
from pathlib import Path

import pytest

from gatekit.driver import ArmInput
from gatekit.provenance import ENV_ALLOWLIST
from gatekit_drivers.command import CommandDriver
from tests.conftest import gate_invoke, write_toml
from tests.faults.faultkit import fault_gate

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*(ROOT / "gatekit").rglob("*.py"), *(ROOT / "drivers").rglob("*.py")])
HOSTILE = "on $(touch PWNED1); touch PWNED2 `touch PWNED3` 'q' \"dq\" {run} *"


def test_no_code_path_uses_a_shell() -> None:
    offenders = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.keyword) and node.arg == "shell" and not (
                    isinstance(node.value, ast.Constant) and node.value.value is False):
                offenders.append(f"{path.name}:{node.lineno} shell=")
            if isinstance(node, ast.Attribute) and node.attr in ("system", "popen", "getoutput",
                                                                 "getstatusoutput", "spawnlp", "execlp"):
                if isinstance(node.value, ast.Name) and node.value.id in ("os", "subprocess"):
                    offenders.append(f"{path.name}:{node.lineno} {node.value.id}.{node.attr}")
    assert offenders == []


def test_each_placeholder_fills_exactly_one_argument(tmp_path: Path) -> None:
    driver = CommandDriver.from_options(
        {"argv": ["trainer", "--config={arm_config}", "{arm_config}", "{run}", "{result}"]},
        source=tmp_path / "gate.toml", base_dir=tmp_path)
    config = tmp_path / "a b;c $(d)\n{run}.toml"
    argv = driver.command_for(ArmInput("on", config, args=("{run}", "x y")), run="on-r1",
                              result=tmp_path / "r e s")
    assert argv == ["trainer", f"--config={config}", str(config), "on-r1", str(tmp_path / "r e s"), "{run}", "x y"]


def test_argv_reaches_the_trainer_verbatim_and_no_shell_runs(tmp_path: Path) -> None:
    g = fault_gate(tmp_path / "g", gate={"n": 2, "expect_diff": []},
                   driver={"argv": ["{python}", "fault_trainer.py", "--config", "{arm_config}", "--run={run}"]})
    hostile_config = g.root / f"{HOSTILE}.toml"
    (g.root / "on.toml").rename(hostile_config)
    argv_log = g.root / "argv.jsonl"
    for arm in ("off.toml", hostile_config.name):
        data = tomllib.loads((g.root / arm).read_text())
        write_toml(g.root / arm, {**data, "argv_log": str(argv_log), "flags": {}})
    gate = tomllib.loads(g.gate.read_text())
    gate["arms"]["on"] = {"config": hostile_config.name, "args": ["; touch PWNED4", "$(touch PWNED5)", "a b", "{run}"]}
    write_toml(g.gate, gate)
    done = gate_invoke("run", "off", "on", cwd=g.root)
    assert done.returncode == 0, done.stderr
    seen = [json.loads(line)["argv"] for line in argv_log.read_text().splitlines()]
    assert seen[1] == ["fault_trainer.py", "--config", str(hostile_config), "--run=on-r1",
                       "; touch PWNED4", "$(touch PWNED5)", "a b", "{run}"]
    assert not list(g.root.rglob("PWNED*")) and not list(Path.cwd().glob("PWNED*"))


def test_paths_in_a_gate_file_resolve_relative_to_it(tmp_path: Path) -> None:
    g = fault_gate(tmp_path / "g", gate={"n": 2})
    for arm in ("off.toml", "on.toml"):
        data = tomllib.loads((g.root / arm).read_text())
        write_toml(g.root / arm, {**data, "argv_log": str(g.root / "argv.jsonl")})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = gate_invoke("run", "off", "on", "--gate", str(g.gate), cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert list(elsewhere.iterdir()) == []  # nothing lands where gate was started
    assert (g.root / "findings").is_dir() and (g.root / "runs").is_dir()
    cwds = {json.loads(line)["cwd"] for line in (g.root / "argv.jsonl").read_text().splitlines()}
    assert cwds == {str(g.root)}  # the trainer runs in the gate file's folder
    predecision = tomllib.loads((g.series() / "predecision.toml").read_text())
    assert list(predecision["artifacts"]) == [str(g.root / "fault_trainer.py")]
    assert {a["path"] for a in predecision["arm_configs"].values()} == {str(g.root / "off.toml"),
                                                                       str(g.root / "on.toml")}


SECRETS = {"AWS_SECRET_ACCESS_KEY": "aws-secret-5f1e2d", "GITHUB_TOKEN": "ghp_secret_token_8c7b",
           "HF_TOKEN": "hf_secret_44aa", "MY_DB_PASSWORD": "hunter2-secret-pw"}


def test_provenance_records_only_allowlisted_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    probe = tmp_path / "env_seen.jsonl"
    g = fault_gate(tmp_path / "g", gate={"n": 2},
                   both={"env_probe": str(probe), "env_names": [*SECRETS, "CUDA_VISIBLE_DEVICES"]})
    # gate runs in this process: its environment is this process's, set through monkeypatch
    for name in ENV_ALLOWLIST:
        monkeypatch.delenv(name, raising=False)
    for name, value in {**SECRETS, "CUDA_VISIBLE_DEVICES": "7", "OMP_NUM_THREADS": "3"}.items():
        monkeypatch.setenv(name, value)
    done = gate_invoke("run", "off", "on", "--json", cwd=g.root)
    assert done.returncode == 0, done.stderr
    # the trainer did get its whole environment (so the secrets really were there to leak) ...
    assert all(json.loads(line) == {**dict.fromkeys(SECRETS, True), "CUDA_VISIBLE_DEVICES": True}
               for line in probe.read_text().splitlines())
    # ... and provenance kept only the allow-listed variables
    assert g.finding()["provenance"]["host"]["env"] == {"CUDA_VISIBLE_DEVICES": "7", "OMP_NUM_THREADS": "3"}
    written = [p for p in g.root.rglob("*") if p.is_file()]
    assert {"journal.jsonl", "predecision.toml", "record.json", "samples.csv"} <= {p.name for p in written}
    arm_configs = {g.root / "off.toml", g.root / "on.toml"}  # they list the names for the probe
    for path in written:
        content = path.read_bytes()
        for name, value in SECRETS.items():
            assert value.encode() not in content, f"the value of {name} leaked into {path}"
            assert path in arm_configs or name.encode() not in content, f"{name} leaked into {path}"
    for value in SECRETS.values():
        assert value not in done.stdout and value not in done.stderr


KEY = '<script>alert("k")</script>\x1b[2J\nVERDICT: ADOPTED\u202e'
VALUE = '<script>alert("v")</script> "double" \'single\' \\ back \x1b]0;title\x07'


def test_trainer_strings_are_exact_in_json_and_toml_and_escaped_on_the_terminal(tmp_path: Path) -> None:
    g = fault_gate(tmp_path / "g", gate={"n": 2},
                   off={"flags": {"optimizer": "host", KEY: VALUE + "off"}},
                   on={"flags": {"optimizer": "resident", KEY: VALUE + "on"}},
                   both={"stdout": '<script>alert(1)</script> "quoted" \'single\' \x1b[31mred'})
    done = gate_invoke("run", "off", "on", cwd=g.root)
    assert done.returncode == 3, done.stderr  # the arms differ in an undeclared key: invalid
    finding = g.finding()
    toml_finding = tomllib.loads((g.root / "findings" / f"{finding['meta']['id']}.toml").read_text())
    assert toml_finding == finding  # both formats hold the hostile strings exactly
    assert finding["runs"][0]["config"][KEY] == VALUE + "off"
    assert any(KEY in reason for reason in finding["verdict"]["reasons"])
    # the terminal shows them escaped: no escape sequence, no bidi override, no forged verdict line
    for stream in (done.stdout, done.stderr):
        assert "\x1b" not in stream and "\u202e" not in stream and "\x07" not in stream
    verdicts = [line for line in done.stdout.splitlines() if line.startswith("VERDICT")]
    assert verdicts == ["VERDICT: INVALID"]
    assert "\\x1b[2J\\nVERDICT: ADOPTED\\u202e" in done.stdout
    (run_dir,) = [p for p in g.series().iterdir() if p.name == "off-r1"]
    assert "<script>alert(1)</script>" in (run_dir / "stdout.log").read_text()  # logs keep the raw bytes


def test_html_report_escapes_trainer_strings(tmp_path: Path) -> None:
    g = fault_gate(tmp_path / "g", gate={"n": 2},
                   off={"flags": {"optimizer": "host", KEY: VALUE + "off"}},
                   on={"flags": {"optimizer": "resident", KEY: VALUE + "on"}})
    gate_invoke("run", "off", "on", cwd=g.root)
    (finding,) = (g.root / "findings").glob("*.json")
    done = gate_invoke("report", str(finding), "--html", str(tmp_path / "html"), cwd=g.root)
    assert done.returncode == 0, done.stderr
    pages = [p.read_text() for p in (tmp_path / "html").rglob("*.html")]
    assert pages
    for page in pages:
        assert '<script>alert("' not in page and "\x1b" not in page
    assert any("&lt;script&gt;" in page for page in pages)
    done = gate_invoke("report", str(finding), "--md", str(tmp_path / "report.md"), cwd=g.root)
    assert done.returncode == 0, done.stderr
    markdown = (tmp_path / "report.md").read_text()
    assert "<script>" not in markdown and "\x1b" not in markdown and "&lt;script&gt;" in markdown


def test_the_environment_allowlist_is_documented() -> None:
    doc = (ROOT / "docs" / "reliability.md").read_text()
    for name in ENV_ALLOWLIST:
        assert name in doc, f"{name} missing from docs/reliability.md"


HOSTILE_URLS = ["javascript:alert(1)", "JaVaScRiPt:alert(2)", "  javascript:alert(3)", "java\tscript:alert(4)",
                "java\nscript:alert(5)", "\x01javascript:alert(6)", "data:text/html,<script>alert(7)</script>",
                "vbscript:msgbox(8)", "file:///etc/passwd"]
SAFE_URLS = ["https://example.com/a?b=c&d=e", "http://example.com/", "../other-2026-11-30/index.html",
             "figures/x.png", "#runs"]


class _Attributes(html.parser.HTMLParser):
    """Every href and src as a browser reads it (entities decoded)."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [(name, value or "") for name, value in attrs if name in ("href", "src")]


def _pages_with_sections(sections: list[dict[str, object]]) -> tuple[str, str]:
    from gatekit.report.rundata import NO_RUNS
    from gatekit.report.site import markdown_files, prepare, report_files
    from tests.findings_kit import finding_of, golden_data

    data = golden_data()
    data["sections"] = [*data["sections"], *sections]
    prepared = prepare([(finding_of(data), NO_RUNS, "f.json")])
    (page,) = [content for name, content in report_files(prepared).items() if name.endswith("index.html")]
    return page.decode(), markdown_files(prepared, "r.md")["r.md"].decode()


def test_only_http_and_relative_links_and_images_are_rendered() -> None:
    """Issue 19, point 12: a finding section {"type": "links", "items": [{"href": "javascript:…"}]} rendered as
    <a href="javascript:…">, a figure as <img src="javascript:…">, in HTML and Markdown. Now a link or an image
    is rendered only for an http(s) URL or a relative one, judged as a browser reads it (case, spaces and
    control characters around it, tabs and newlines inside); the others show as text, saying why."""
    urls = HOSTILE_URLS + SAFE_URLS
    page, markdown = _pages_with_sections([
        {"type": "links", "items": [{"text": f"link {i}", "href": url} for i, url in enumerate(urls)]},
        *({"type": "figure", "src": url, "alt": f"image {i}", "caption": f"caption {i}"} for i, url in enumerate(urls))])
    attributes = _Attributes()
    attributes.feed(page)
    for name, value in attributes.urls:
        assert value.startswith(("http://", "https://")) or ":" not in value.split("/")[0], (name, value)
    for url in SAFE_URLS:
        assert ("href", url) in attributes.urls and ("src", url) in attributes.urls, url
    for text in (page.lower(), markdown.lower()):
        assert "script:" not in text.replace("\t", "").replace("\n", "") and "data:" not in text
        assert "file:" not in text
    assert page.count("link left out") == markdown.count("link left out") == len(HOSTILE_URLS)
    assert page.count("image left out") == markdown.count("image left out") == len(HOSTILE_URLS)
    destinations = re.findall(r"\]\(([^)]*)\)", markdown)
    for url in SAFE_URLS:
        assert destinations.count(url) == 2, (url, destinations)  # the link and the image


def test_a_verdict_box_comes_only_from_gatekit() -> None:
    """Issue 19, point 12: an extra callout with role = "verdict" in a finding's sections showed a second
    verdict box. A section people add is shown as an ordinary callout; the one verdict box is gatekit's."""
    page, markdown = _pages_with_sections([{"type": "callout", "role": "verdict", "decision": "rejected",
                                            "variant": "danger", "label": "Verdict: REJECTED", "text": "forged"}])
    assert page.count('role="status"') == 1 and page.count("data-decision=") == 1
    assert 'data-decision="adopted"' in page
    assert page.count(" verdict\"") == 1  # the verdict class, on gatekit's box alone
    assert "Verdict: REJECTED" in page and "forged" in page  # shown, as what it is: a callout someone wrote
    assert "Verdict: REJECTED" in markdown
