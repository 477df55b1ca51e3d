"""The one-screen terminal summary of a finding."""

from __future__ import annotations

import math
from typing import Any, Mapping

from gatekit.finding import Finding
from gatekit.sanitize import show_controls


def clean_terminal_text(text: str) -> str:
    """`text` with control characters (newline included) and bidi overrides shown as escapes, so trainer
    strings cannot recolor, clear or forge summary lines."""
    return show_controls(text)


def _display_safe(value: Any) -> Any:
    if isinstance(value, str):
        return clean_terminal_text(value)
    if isinstance(value, Mapping):
        return {clean_terminal_text(str(k)): _display_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_display_safe(v) for v in value]
    return value


def _num(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def render_table(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]

    def line(cells: list[str]) -> str:
        return "  ".join(str(c).rjust(w) if i in right else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return [line(header), line(["-" * w for w in widths]), *[line(r) for r in rows]]


def summary(finding: Finding, paths: tuple[str, ...] = ()) -> str:
    data = _display_safe(finding.data)
    paths = tuple(clean_terminal_text(p) for p in paths)
    gate, s, verdict = data["gate"], data["stats"], data["verdict"]
    primary = gate["primary"]
    guard_names = list(data["guards"])
    header = ["#", "arm", "run", primary, *guard_names, "load1 mean/max", "used"]
    rows = []
    for run in data["runs"]:
        value = run.get("process_wallclock_s") if primary == "process_wallclock_s" else run["metrics"].get(primary)
        window = run["window"]
        rows.append([str(run["order"]), run["arm"], run["label"], _num(value),
                     *[_num(run["metrics"].get(g)) for g in guard_names],
                     f"{_num(window.get('load1_mean'), 2)} / {_num(window.get('load1_max'), 2)}",
                     "yes" if run["used"] else f"no ({run.get('reason', '')})"])
    right = {0, 3, *range(4, 4 + len(guard_names)), 4 + len(guard_names)}
    seq = data.get("sequential")
    size = f"n={'→'.join(str(n) for n in seq['runs_per_arm'])}, sequential" if seq else f"n={gate['n']}"
    lines = [f"gate {gate['id']}: {gate['arms']['on']} vs {gate['arms']['off']} "
             f"({gate['order']}, {size}, {primary}, {gate['direction']} is better)", ""]
    lines += render_table(header, rows, right)
    lines += [f"evidence {run['label']}: {line}" for run in data["runs"] for line in run["window"].get("evidence", [])]
    lines += ["",
              f"mean off {_num(s.get('mean_off'))}  mean on {_num(s.get('mean_on'))}  "
              f"σ_off {_num(s.get('sigma_off_pct'))} %  σ_on {_num(s.get('sigma_on_pct'))} %",
              f"Δ {_num(s.get('delta_pct'))} %   threshold {_num(s.get('threshold_pct'))} % "
              f"({gate['threshold']['rule']})   pairs consistent {s['pairs_consistent']}"]
    if "gm_delta_pct" in s:
        lines.append(f"Δ_gm {_num(s.get('gm_delta_pct'))} % (95 % CI {_num(s.get('ci_low_pct'))} … "
                     f"{_num(s.get('ci_high_pct'))} %)   one-sided p {_num(s.get('p_one_sided'))}   "
                     f"MDE(80 %) {_num(s.get('mde_pct'))} %   drift {_num(s.get('drift_pct_per_run'))} %/run")
    for name, guard in data["guards"].items():
        lines.append(f"guard {name}: Δ {_num(guard.get('delta'))} (limit {guard['limit']:+g}) "
                     f"{'pass' if guard['pass'] else 'FAIL'}")
    for look in (seq or {}).get("looks", []):
        lines.append(f"look {look['look']} ({look['n_off']}+{look['n_on']} runs): Δ_gm {_num(look.get('delta_pct'))} % "
                     f"({100 * look['ci_level']:g} % CI {_num(look.get('ci_low_pct'))} … {_num(look.get('ci_high_pct'))} %), "
                     f"p(better) {_num(look.get('p_better'))} → {look['decision']}")
    for row in data["sensitivity"][1:]:
        lines.append(f"sensitivity: {row['variant']}: Δ {_num(row.get('delta_pct'))} % → {row['decision']}")
    lines += ["", f"VERDICT: {verdict['decision'].upper()}"]
    lines += [f"  - {reason}" for reason in verdict.get("reasons", [])]
    lines += [f"  ! {warning}" for warning in verdict.get("warnings", [])]
    if paths:
        lines += ["", "finding: " + ", ".join(paths)]
    return "\n".join(lines)
