"""Findings for report, export and history tests: the reviewed golden finding, variants of it, and a
hostile one whose every trainer-supplied string carries markup, quotes and control characters."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

from gatekit.finding import Finding

GOLDEN = Path(__file__).parent / "golden"
FIXTURES = Path(__file__).parent / "fixtures"

# What a trainer (or a gate file) could put into a finding to attack the page that shows it.
SCRIPT = '<script>window.__pwned = 1</script>'
IMG = '<img src=x onerror="window.__pwned=2">'
QUOTES = '"\' onmouseover="window.__pwned=3" x=\''
PAYLOAD = f'{SCRIPT}{IMG}{QUOTES}|**bold**|`tick`&amp;'


def golden_data() -> dict[str, Any]:
    """The golden finding's document. Under GATEKIT_REGOLD=1 it is made afresh (as test_finding_golden
    writes it), so report and export goldens never follow a stale finding.json, whatever order tests run in."""
    if os.environ.get("GATEKIT_REGOLD"):
        from gatekit.analysis import analyze
        from tests.test_finding_golden import EVIDENCE
        return json.loads(analyze(EVIDENCE).to_json())
    return json.loads((GOLDEN / "finding.json").read_text())


def finding_of(data: dict[str, Any], source: str = "test finding") -> Finding:
    """The typed finding of a document (what loading a file of it gives)."""
    return Finding.from_document(data, source=source)


def write_json(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False))
    return path


def variant(finding_id: str, date: str, *, delta_pct: float | None = None, mean_on: float | None = None,
            decision: str | None = None, related: list[str] | None = None, gate_id: str | None = None,
            title: str | None = None) -> dict[str, Any]:
    """The golden finding under another id and date, with the numbers a test needs."""
    data = golden_data()
    data["meta"].update(id=finding_id, date=date, title=title or f"Finding {finding_id}")
    if related is not None:
        data["meta"]["related_findings"] = related
    if delta_pct is not None:
        data["stats"]["delta_pct"] = delta_pct
    if mean_on is not None:
        data["stats"]["mean_on"] = mean_on
    if decision is not None:
        data["verdict"]["decision"] = decision
    if gate_id is not None:
        data["gate"]["id"] = gate_id
    return data


def hostile_data() -> dict[str, Any]:
    """The golden finding with PAYLOAD in config echoes, metric names, labels, reasons, sections and meta."""
    data = golden_data()
    evil_metric = f"psnr{PAYLOAD}"
    data["meta"]["title"] = f"Title {PAYLOAD}"
    data["meta"]["tags"] = [PAYLOAD, "ok-tag"]
    data["meta"]["related_findings"] = [PAYLOAD, "../../etc/passwd"]
    data["meta"]["subtitle"] = f"Subtitle {PAYLOAD}"
    data["gate"]["arms"] = {"off": "off", "on": "on"}
    data["gate"]["id"] = f"gate{PAYLOAD}"
    data["gate"]["guards"][0]["metric"] = evil_metric
    guard = data["guards"].pop("psnr_db")
    guard["metric"] = evil_metric
    guard["note"] = f"note {PAYLOAD}"
    data["guards"][evil_metric] = guard
    for run in data["runs"]:
        run["metrics"][evil_metric] = run["metrics"].pop("psnr_db", 30.0)
        run["config"][f"flag{PAYLOAD}"] = f"value {PAYLOAD}\x01\x1b[31m"
        if not run["used"]:
            run["reason"] = f"reason {PAYLOAD}"
    data["verdict"]["reasons"] = [f"reason {PAYLOAD}", *data["verdict"]["reasons"]]
    data["verdict"]["warnings"] = [f"warning {PAYLOAD}"]
    data["sensitivity"][1]["variant"] = f"variant {PAYLOAD}"
    data["sections"] = copy.deepcopy(data["sections"]) + [
        {"type": "heading", "text": f"Heading {PAYLOAD}"},
        {"type": "callout", "label": f"Label {PAYLOAD}", "variant": 'info" onclick="window.__pwned=4',
         "text": f"Callout {PAYLOAD}"},
        {"type": "kv", "items": [{"key": f"k {PAYLOAD}", "value": f"v {PAYLOAD}"}]},
        {"type": "table", "columns": [f"c {PAYLOAD}"], "align": ['left" onclick="x'], "rows": [[f"r {PAYLOAD}"]]},
        {"type": "list", "items": [f"item {PAYLOAD}"]},
        {"type": f"unknown{PAYLOAD}", "text": PAYLOAD},
    ]
    return data


# Narrative sections shaped like the decoded seed finding's (its §1, §2, §6 and §7), shortened.
SEED_SECTIONS = [
    {"type": "lead", "text": "`p3-s4-host-shadow` §7 の follow-up — `[backend] ssim_reduce` flag に **3 variant** を追加した。"},
    {"type": "heading", "text": "1. `read_mean_ssim` の呼び出し経路と消費箇所の分類"},
    {"type": "table", "columns": ["呼び出し元", "経路", "消費先"], "align": ["left", "left", "left"],
     "rows": [["`train_loop.rs` L266", "`wait(B_it)` 直後に同期呼び出し", "`total_loss` → `history.push`"]]},
    {"type": "kv", "items": [{"key": "`loss_history`", "value": "**唯一の実質的な消費者はさらに 2 段先**"}]},
    {"type": "callout", "label": "判定 — wallclock / PSNR guard とも pass、3/3 pair 一貫", "variant": "success",
     "text": "Δ **-1.4347%** (閾値 max(2σ_off,1%)=1.0%)、PSNR +0.053dB"},
    {"type": "callout", "label": "host 仕事の削減量と wallclock 回収量は 1:1 でない", "variant": "info",
     "text": "変換効率 ~13%"},
    {"type": "list", "items": ["`splat-metal/src/kernels/ssim.rs`: `pso_sum_reduce` PSO", "**gate 対象外**のまま"]},
]
