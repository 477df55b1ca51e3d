"""`--json` on the commands that print a result (check, verify, drivers, campaign; run, analyze, compare and bisect
print their findings), and the gate file found where a repository keeps it: gate.toml here or in the nearest folder
above, up to the repository's root, said on stderr."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import gatekit
from tests.conftest import FIXTURES, gate_cli, gate_invoke, make_gate
from tests.test_campaign import FAST, make_campaign
from tests.test_compare import _git, commit, make_repo


def test_check_json_lists_each_check(tmp_path: Path) -> None:
    gate_dir = make_gate(tmp_path / "g")
    done = gate_invoke("check", "--json", cwd=gate_dir.root)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True and report["checks"]
    assert all(set(item) == {"name", "ok", "warn", "detail"} and item["ok"] and not item["warn"]
               for item in report["checks"])
    plain = gate_invoke("check", cwd=gate_dir.root)
    assert len(plain.stdout.splitlines()) == len(report["checks"])


def test_drivers_json_names_the_plugins() -> None:
    done = gate_invoke("drivers", "--json", cwd=Path.cwd())
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    assert {"name": "command", "target": "gatekit_drivers.command:CommandDriver"} in listed["drivers"]
    assert {b["name"] for b in listed["backends"]} >= {"cpu", "cuda", "metal"}
    assert all(b["status"] in ("available", "not available", "broken") for b in listed["backends"])


def test_verify_json_says_what_was_verified(tmp_path: Path) -> None:
    gate_dir = make_gate(tmp_path / "g")
    result = gatekit.run("off", "on", gate=gate_dir.gate, n=2)
    finding = next(p for p in result.finding_paths if p.suffix == ".json")
    done = gate_invoke("verify", str(result.series_dir), str(finding), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["kind"], report["records"], report["finding"]) == ("series", 4, str(finding))
    assert report["chain_head"] == result.finding.predecision.chain_head


def test_campaign_json_names_each_gate_and_its_finding(tmp_path: Path) -> None:
    path = make_campaign(tmp_path, [("alpha", {"elapsed": FAST})])
    done = gate_cli("campaign", str(path), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    (entry,) = document["gates"]
    assert entry["outcome"]["status"] == "finished" and Path(entry["outcome"]["finding"]).is_file()
    assert Path(document["campaign"]).is_dir()


def _repository(root: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "src" / "deep").mkdir(parents=True)
    return root / "src" / "deep"


def test_a_gate_file_above_the_working_directory_is_used_and_said(tmp_path: Path) -> None:
    gate_dir = make_gate(tmp_path / "repo")
    below = _repository(gate_dir.root)
    done = gate_invoke("check", cwd=below)
    assert done.returncode == 0, done.stderr
    assert "using gate file ../../gate.toml" in done.stderr
    here = gate_invoke("check", cwd=gate_dir.root)  # the gate file here: nothing to say
    assert here.returncode == 0 and "using gate file" not in here.stderr


def test_the_search_stops_at_the_repository_root(tmp_path: Path) -> None:
    make_gate(tmp_path / "outside")  # a gate.toml above the repository is not the repository's
    below = _repository(tmp_path / "outside" / "repo")
    done = gate_invoke("check", cwd=below)
    assert done.returncode == 2
    assert "using gate file" not in done.stderr and "gate.toml" in done.stderr
    outside = tmp_path / "outside" / "plain" / "folder"  # not in a repository: only the working directory
    outside.mkdir(parents=True)
    assert gate_invoke("check", cwd=outside).returncode == 2


def test_analyze_a_csv_with_the_gate_file_above(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    below = _repository(root)
    shutil.copy(FIXTURES / "seed_gate.toml", root / "gate.toml")
    done = gate_invoke("analyze", str(FIXTURES / "seed_s6.csv"), "--json", cwd=below)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["verdict"]["decision"] == "adopted"
    assert "using gate file ../../gate.toml" in done.stderr


def test_compare_reads_the_gate_file_above_in_heads_tree(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / "src").mkdir()
    (repo / "src" / "model.py").write_text("# the model\n")
    base = commit(repo, "a source folder")
    commit(repo, "a slower data loader", slowdown=1.2)
    done = gate_cli("compare", base, "--json", cwd=repo / "src")
    assert done.returncode == 0, done.stderr
    assert "using gate file" in done.stderr and ":gate.toml (HEAD's tree, 1 folder(s) above this one)" in done.stderr
    assert json.loads(done.stdout)["verdict"]["decision"] == "regression"
    assert list((repo / "runs").glob("compare-pr-*"))  # out and runs relative to the gate file's folder
    assert _git(repo, "status", "--porcelain") == ""
