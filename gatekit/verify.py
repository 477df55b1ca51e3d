"""Verifying a series' evidence (pure reading): the journal's hash chain, the predecision it is anchored
on, every run folder's `record.json` against its journal event, a finding against its recomputation, and
an optional Ed25519 signature of the finding and the chain head.

The first disagreement is a `VerificationError` (exit 3) naming the file and the line. What a chain can and
cannot show is in docs/reliability.md ("Tamper evidence"): without a key, an attacker who rewrites every
file consistently is caught only where the chain head was published elsewhere (the CI summary prints it).
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from gatekit.distribution import install_hint
from gatekit.errors import (ConfigError, FindingError, GatekitError, OutputError, RunFileError, SeriesError,
                            VerificationError)
from gatekit.provenance import hash_files, sha256_file
from gatekit.records import (JOURNAL_OF_PREDECISION, JOURNAL_SCHEMA, MISSING, SCHEMA_KEY, SIGNATURE_OF_JSON_BYTES,
                             SIGNATURE_SCHEMA, UNCHAINED_JOURNAL, canonical_json, first_difference,
                             journal_schema, loads_json, schema_problem, show_value)
from gatekit.runfiles import MAX_RESULT_BYTES, read_run_file
from gatekit.storage import (EMPTY_SHA256, LEGACY_JOURNAL_WARNING, Journal, SeriesLayout, atomic_write_text,
                             line_sha256, read_input)

if TYPE_CHECKING:  # the analysis (pandas) behind a finding loads only when a finding is recomputed
    from gatekit.config import GateConfig
    from gatekit.finding import Finding

MAX_RECORD_BYTES = 4 * MAX_RESULT_BYTES  # a run's record holds its result's data, indented
# Every typed section of a finding is recomputed from the journal and must be equal, but the narrative
# (prose a newer gatekit may word differently) and the paths, which read relative to where the series lies.
NARRATIVE_SECTIONS = ("sections",)
PATH_FIELDS = (("meta", "related_runs"), ("meta", "config_paths"), ("predecision", "path"))


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """What a verification checked: events chained, records cross-checked, finding and signature."""

    series_dir: Path
    events: int
    chain_head: str | None  # None: a legacy journal (no chain to verify)
    records: int
    finding: Path | None = None
    signature: Path | None = None
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # how a check was made where it was made a weaker way (an older finding's)

    @property
    def legacy(self) -> bool:
        return self.chain_head is None


def verify_series(series_dir: Path, finding_path: Path | None = None, *,
                  pubkey: Path | None = None) -> VerifyReport:
    """Recompute the chain, check the predecision hash and every `record.json`; given a finding, check it
    equals what `analyze_series` recomputes and records the journal's chain head; given a public key,
    check the finding's signature. Raises VerificationError at the first disagreement."""
    layout = SeriesLayout(series_dir)
    journal_path = layout.journal
    events, head, run_ends, lines = _verify_chain(series_dir, journal_path)
    journaled = dict(lines)
    for label, (number, record) in sorted(run_ends.items()):
        _verify_record(layout.run(label).record, journal_path, number, record)
        _verify_run_files(layout.run(label).evidence, journal_path, number, journaled[number].get("files"))
    warnings = (LEGACY_JOURNAL_WARNING,) if head is None else ()
    signature = None
    notes: tuple[str, ...] = ()
    if finding_path is not None:
        notes = _verify_finding(series_dir, finding_path, head)
        if pubkey is not None:
            signature = check_signature(finding_path, head, pubkey)
    elif pubkey is not None:
        raise ConfigError("--pubkey checks a finding's signature: name the finding too "
                          "(gate verify SERIES_DIR FINDING --pubkey FILE)")
    return VerifyReport(series_dir, events, head, len(run_ends), finding_path, signature, warnings, notes)


def check_written_journal(journal: Journal, verified_head: str | None) -> None:
    """Before a gate reports success over the journal it wrote: the chain it verified (`verified_head`) ends
    on the line this process wrote last. A line after that one was appended by another process (the code
    under test writing into gatekit's folder): VerificationError (exit 3) naming the first such line."""
    if verified_head == journal.head:
        return
    ours = next((number for number, line, _ in journal.lines() if line_sha256(line) == journal.head), None)
    where = f"line {ours + 1}" if ours is not None else "its last line"
    raise VerificationError(f"{journal.path}: {where}: not written by this gate, yet its hash chain verifies; "
                            "another process (the code under test?) wrote into gatekit's folder, so nothing "
                            "it says can be trusted")


def analyze_series(series_dir: Path, config: GateConfig | None = None) -> Finding:
    """Recompute a series' finding offline: the evidence verified first (`verify_series`: the journal's
    hash chain, the predecision hash, every record.json; exit 3 on tampering), then the journal replayed
    once (and, given the gate's config, the gate file and arm configs checked too)."""
    from gatekit.series_replay import analyze_unverified

    verify_series(series_dir)
    return analyze_unverified(series_dir, config)


def verify_chain(journal_path: Path, genesis: Path) -> tuple[list[tuple[int, Mapping[str, Any]]], str]:
    """A journal that is not a series' (a campaign's): every line chained, the first on the sha256 of
    `genesis`. Returns its (line number, event) pairs and its chain head; VerificationError naming the line."""
    _, head, _, events = _verify_chain(journal_path.parent, journal_path, genesis=genesis)
    if head is None:
        raise VerificationError(f"{journal_path}: line 1: has no prev; this journal is always hash-chained")
    return events, head


def _verify_chain(series_dir: Path, journal_path: Path, genesis: Path | None = None) -> tuple[
        int, str | None, dict[str, tuple[int, Mapping[str, Any]]], list[tuple[int, Mapping[str, Any]]]]:
    """(events, chain head or None for a legacy journal, {label: (line, record) of its latest run_end},
    (line, event) of every line). A series journal is anchored on its predecision; another (`genesis`) on it."""
    if not journal_path.is_file():
        raise SeriesError(f"{journal_path}: no journal here; is this a series directory?")
    try:
        lines = list(Journal(journal_path).lines())
    except SeriesError as exc:  # a line that is not JSON in the middle of the journal
        raise VerificationError(str(exc)) from None
    if not lines:
        raise VerificationError(f"{journal_path}: empty journal; nothing to verify")
    schema = journal_schema(lines[0][2])
    problem = schema_problem(schema, JOURNAL_SCHEMA)
    if problem:
        raise VerificationError(f"{journal_path}: line {lines[0][0]}: {problem}")
    if genesis is None:
        _refuse_downgrade(series_dir, lines[0][2], schema, f"{journal_path}: line {lines[0][0]}")
    chained = schema != UNCHAINED_JOURNAL  # a journal that names its format is chained: every line needs its prev
    previous: tuple[int, bytes] | None = None
    run_ends: dict[str, tuple[int, Mapping[str, Any]]] = {}
    events: list[tuple[int, Mapping[str, Any]]] = []
    for number, line, event in lines:
        if not isinstance(event, Mapping) or not isinstance(event.get("event"), str):
            raise VerificationError(f"{journal_path}: line {number}: not a journal event")
        kind = event["event"]
        where = f"{journal_path}: line {number} ({kind})"
        if chained:
            if previous is None and genesis is not None:
                expected, source = _file_sha256(genesis, where), str(genesis)
            elif previous is None:
                expected, source = _anchor(series_dir, event, where)
            else:
                expected, source = line_sha256(previous[1]), f"line {previous[0]}"
            if "prev" not in event and previous is None:
                raise VerificationError(f"{where}: has no prev, but the journal names {schema}, which is "
                                        "hash-chained; an unchained journal cannot pass for it")
            if "prev" not in event:
                raise VerificationError(f"{where}: has no prev; the chain from line {lines[0][0]} is broken")
            if event["prev"] != expected:
                anchor = f" (sha256 {expected}, the line's prev {event['prev']})" if previous is None else ""
                raise VerificationError(f"{where}: prev does not match {source}{anchor}")
        if kind == "series_start" and previous is None and genesis is None:
            _verify_predecision(series_dir, event, where)
        if kind == "run_end":
            record = event.get("record")
            label = record.get("label") if isinstance(record, Mapping) else None
            if not isinstance(record, Mapping) or not isinstance(label, str) or not label or "/" in label \
                    or label.startswith("."):
                raise VerificationError(f"{where}: has no usable record.label")
            run_ends[label] = (number, record)
        events.append((number, event))
        previous = (number, line)
    assert previous is not None
    return len(lines), line_sha256(previous[1]) if chained else None, run_ends, events


def _refuse_downgrade(series_dir: Path, first: Any, schema: object, where: str) -> None:
    """A series journal older than its predecision's format allows: its chain (or the name of its format)
    was stripped, so it would pass as a legacy journal with nothing to verify."""
    if not (isinstance(first, Mapping) and first.get("event") == "series_start"):
        return
    try:
        predecision = tomllib.loads(SeriesLayout(series_dir).predecision.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return  # the anchor's check names an unreadable predecision; a damaged one fails its sha256
    required = JOURNAL_OF_PREDECISION.get(predecision.get(SCHEMA_KEY, ""))
    if required is not None and schema != required:
        raise VerificationError(f"{where} (series_start): the predecision names {predecision[SCHEMA_KEY]}, "
                                f"whose journal is {required} (hash-chained, naming its format), but this one "
                                f"reads as {schema}: its chain or format was stripped")


def _anchor(series_dir: Path, event: Mapping[str, Any], where: str) -> tuple[str, str]:
    """What the first event's prev must be: the predecision's sha256 (a series), or of no bytes."""
    path = SeriesLayout(series_dir).predecision
    if event.get("event") == "series_start":
        return _file_sha256(path, where), str(path)
    return EMPTY_SHA256, "the empty anchor of a journal without a predecision"


def _verify_predecision(series_dir: Path, start: Mapping[str, Any], where: str) -> None:
    path = SeriesLayout(series_dir).predecision
    actual = _file_sha256(path, where)
    if start.get("predecision_sha256") != actual:
        raise VerificationError(f"{path}: sha256 {actual} differs from {where.split(': ', 1)[1]}'s "
                                f"predecision_sha256 {start.get('predecision_sha256')}; the rules were changed "
                                "after the series started")


def _file_sha256(path: Path, where: str) -> str:
    try:
        return sha256_file(path)
    except OSError as exc:
        raise VerificationError(f"{path}: cannot read ({exc.strerror or exc}); {where} is anchored on it") from None


def _verify_record(path: Path, journal_path: Path, number: int, journaled: Mapping[str, Any]) -> None:
    try:  # a run file like the others: a FIFO, a link out or a huge file in its place is refused, not read
        raw = read_run_file(path, MAX_RECORD_BYTES)
        if raw is None:
            raise VerificationError(f"{path}: missing; journal line {number} records this run")
        written = loads_json(raw)
    except RunFileError as exc:
        raise VerificationError(f"{exc}; journal line {number} records this run") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise VerificationError(f"{path}: unreadable ({exc}); journal line {number} records this run") from None
    difference = first_difference(written, journaled)
    if difference is not None:
        raise VerificationError(f"{path}: differs from {journal_path.name} line {number}: {difference}")


def _verify_run_files(files: Mapping[str, Path], journal_path: Path, number: int, recorded: Any) -> None:
    """Each run file as its run_end event hashed it (a journal from before run files were hashed has none)."""
    if not recorded:
        return
    if not isinstance(recorded, Mapping):
        raise VerificationError(f"{journal_path}: line {number} (run_end): files is not a table of hashes")
    unknown = sorted(set(recorded) - set(files))
    if unknown:
        raise VerificationError(f"{journal_path}: line {number} (run_end): names no run file: {', '.join(unknown)}")
    now = hash_files({name: files[name] for name in recorded})
    for name, sha256 in recorded.items():
        if now[name] != sha256:
            raise VerificationError(f"{files[name]}: differs from what {journal_path.name} line {number} recorded "
                                    f"(sha256 {sha256}, now {now[name]})")


def _verify_finding(series_dir: Path, finding_path: Path, head: str | None) -> tuple[str, ...]:
    """The finding's recomputed sections equal the journal's recomputation; its chain head is the journal's.
    Returns the notes on how it was compared (an older finding's reasons, by their prose)."""
    from gatekit.finding import load_finding, twin_difference
    from gatekit.series_replay import analyze_unverified
    from gatekit.verdict import without_retired_warnings

    try:  # a finding that cannot be read (a key stated twice, a forged schema) is evidence that does not verify
        written = load_finding(finding_path)
        difference = twin_difference(finding_path, written)  # a reader of either twin must see what was verified
    except FindingError as exc:
        raise VerificationError(str(exc)) from None
    if difference is not None:
        raise VerificationError(difference)
    recomputed = analyze_unverified(series_dir)
    if written.predecision.chain_head != head:
        raise VerificationError(f"{finding_path}: predecision.chain_head {written.predecision.chain_head} != "
                                f"the journal's chain head {head}")
    if written.predecision.sha256 != recomputed.predecision.sha256:
        raise VerificationError(f"{finding_path}: predecision.sha256 {written.predecision.sha256} != "
                                f"{recomputed.predecision.sha256} in the journal")
    mine, theirs = written.to_dict(), recomputed.to_dict()
    if head is None:  # a legacy finding was written without the warning its re-analysis adds, or (resumed by
        # a later gatekit) with it: either way it says nothing the missing chain does not
        for side in (mine, theirs):
            side["verdict"]["warnings"] = [w for w in side["verdict"].get("warnings", [])
                                           if w != LEGACY_JOURNAL_WARNING]
    if "verdict" in mine:  # a warning this version moved elsewhere (verdict.RETIRED_WARNINGS) is no difference
        mine["verdict"]["warnings"] = list(without_retired_warnings(mine["verdict"].get("warnings", ())))
    notes = _verify_reasons(finding_path, series_dir, mine, theirs)
    if not any("startup_s" in run for run in mine.get("runs", [])):
        # written before run rows carried startup_s: derived from the compared wallclock and primary, so
        # leaving it out of the comparison loses nothing
        for run in theirs.get("runs", []):
            run.pop("startup_s", None)
    for side in (mine, theirs):
        for section, key in PATH_FIELDS:
            side.get(section, {}).pop(key, None)
    for section in dict.fromkeys([*mine, *theirs]):
        if section in NARRATIVE_SECTIONS:
            continue
        difference = first_difference(mine.get(section, MISSING), theirs.get(section, MISSING), section,
                                      recomputed=True)
        if difference is not None:
            raise VerificationError(f"{finding_path}: differs from the finding recomputed from {series_dir}: "
                                    f"{difference}")
    return notes


def _verify_reasons(finding_path: Path, series_dir: Path, mine: dict[str, Any],
                    theirs: dict[str, Any]) -> tuple[str, ...]:
    """The verdict's reasons: their codes equal the recomputation's, then each reason's prose is what its code
    renders to from the recomputed series (so an edited reason names its code). Both are then left out of the
    section comparison. A finding written before reasons had codes is compared by its prose, as it was then,
    and the note returned says so: its reasons carry no code to check."""
    from gatekit.verdict import without_explanations

    written, recomputed = mine.get("verdict"), theirs.get("verdict")
    if not isinstance(written, dict) or not isinstance(recomputed, dict):
        return ()  # a missing verdict is the section comparison's to name
    if "reason_codes" not in written:
        recomputed.pop("reason_codes", None)
        written_reasons = tuple(written.get("reasons", ()))
        if without_explanations(written_reasons) == written_reasons:
            # written before verdicts named their cause and next step: the same decision in fewer words
            recomputed["reasons"] = list(without_explanations(recomputed.get("reasons", ())))
        if not written_reasons:
            return ()
        return (f"{finding_path}: written before reason codes: its verdict reasons were compared by their prose",)
    where = f"{finding_path}: differs from the finding recomputed from {series_dir}"
    codes, reasons = written.pop("reason_codes"), written.get("reasons", [])
    their_codes, their_reasons = recomputed.pop("reason_codes", []), recomputed.get("reasons", [])
    difference = first_difference(codes, their_codes, "verdict.reason_codes")
    if difference is not None:
        raise VerificationError(f"{where}: {difference}")
    if not isinstance(reasons, list) or len(reasons) != len(codes):
        raise VerificationError(f"{where}: verdict.reasons holds {len(reasons) if isinstance(reasons, list) else 0} "
                                f"reason(s) for {len(codes)} code(s)")
    for index, (code, reason, rendered) in enumerate(zip(codes, reasons, their_reasons)):
        if reason != rendered:
            raise VerificationError(f"{where}: verdict.reasons[{index}] ({code}) {show_value(reason)} is not what "
                                    f"{code} renders to from the series: {show_value(rendered)}")
    return ()


# -- signatures ------------------------------------------------------------------------------------------

def signature_path(finding_path: Path) -> Path:
    """`<out>/<id>.sig` beside `<id>.toml` and `<id>.json`."""
    return finding_path.with_suffix(".sig")


def _signed_message(schema: str, finding_sha256: str, chain_head: str | None) -> bytes:
    return f"{schema}\nfinding-sha256 {finding_sha256}\nchain-head {chain_head or 'none'}\n".encode()


def content_sha256(finding: Finding) -> str:
    """sha256 of the finding's one canonical form (its document as compact JSON, keys sorted): the same for
    its TOML and JSON twins, whatever their layout, so a signature covers what either says."""
    return hashlib.sha256(canonical_json(finding.to_dict()).encode("utf-8")).hexdigest()


def _content_sha256_of(path: Path) -> str:
    from gatekit.finding import load_finding

    try:
        return content_sha256(load_finding(path))
    except GatekitError as exc:
        raise VerificationError(f"{path}: cannot read the signed finding: {exc}") from None


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise ConfigError(f"signing needs the cryptography package: {install_hint('sign')}") from None
    return serialization, ed25519


def load_signing_key(key_path: Path) -> Any:
    """An Ed25519 private key from a PEM file (unencrypted); ConfigError naming the file otherwise."""
    serialization, ed25519 = _crypto()
    return _pem_key(key_path, lambda data: serialization.load_pem_private_key(data, password=None),
                    ed25519.Ed25519PrivateKey, what="a signing key (PEM)", pem="an unencrypted PEM private key",
                    ed25519_name="an Ed25519 key (gatekit signs with Ed25519)", private=True)


# An Ed25519 key in PEM is about 120 bytes (a public one about 110); a key file this large is not one
MAX_KEY_BYTES = 16 << 10


def _pem_key(path: Path, load: Any, key_type: type, *, what: str, pem: str, ed25519_name: str,
             private: bool = False) -> Any:
    """A key read from a PEM file (a regular file within MAX_KEY_BYTES; a private one only its owner can read)
    and checked to be Ed25519; one ConfigError line naming the file otherwise."""
    data = read_input(path, what, MAX_KEY_BYTES, private=private)
    try:
        key = load(data)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path}: not {pem} ({exc})") from None
    if not isinstance(key, key_type):
        raise ConfigError(f"{path}: is not {ed25519_name}")
    return key


def _public_hex(public_key: Any) -> str:
    serialization, _ = _crypto()
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def sign_finding(json_path: Path, chain_head: str | None, key: Any, *, resume_hint: str = "") -> Path:
    """Sign the finding's content (its canonical form's sha256, `content_sha256`) and the chain head; writes
    and returns `<id>.sig`. One that cannot be written is an OutputError (exit 4) ending with `resume_hint`,
    how to sign it once the folder is fixed."""
    finding_sha256 = _content_sha256_of(json_path)
    signature = key.sign(_signed_message(SIGNATURE_SCHEMA, finding_sha256, chain_head))
    document = {"schema": SIGNATURE_SCHEMA, "algorithm": "ed25519", "public_key": _public_hex(key.public_key()),
                "finding": json_path.name, "content_sha256": finding_sha256, "chain_head": chain_head,
                "signature": signature.hex()}
    path = signature_path(json_path)
    try:
        atomic_write_text(path, json.dumps(document, indent=2) + "\n")
    except OSError as exc:
        raise OutputError(f"{path}: cannot write the signature: {exc.strerror or exc}; the finding itself is "
                          f"written{'; ' + resume_hint if resume_hint else ''}") from None
    return path


def check_signature(finding_path: Path, chain_head: str | None, pubkey_path: Path) -> Path:
    """Check `<id>.sig` against the public key (PEM), the finding's JSON bytes and the chain head."""
    serialization, ed25519 = _crypto()
    from cryptography.exceptions import InvalidSignature

    public_key = _pem_key(pubkey_path, serialization.load_pem_public_key, ed25519.Ed25519PublicKey,
                          what="a public key (PEM)", pem="a PEM public key", ed25519_name="an Ed25519 public key")
    path = signature_path(finding_path)
    try:
        document = loads_json(path.read_bytes())
        signature = bytes.fromhex(document["signature"])
    except FileNotFoundError:
        raise VerificationError(f"{path}: missing; the finding was not signed (gate run --sign-key)") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise VerificationError(f"{path}: not a gatekit signature ({exc!r})") from None
    json_path = finding_path.with_suffix(".json")
    schema = document.get("schema")
    if schema == SIGNATURE_OF_JSON_BYTES:  # signed before signatures covered the content: the JSON file's bytes
        try:
            signed = {json_path: sha256_file(json_path)}
        except OSError as exc:
            raise VerificationError(f"{json_path}: cannot read the signed finding: {exc.strerror or exc}") from None
    elif schema == SIGNATURE_SCHEMA:  # the content, as the file named and as its twin says it
        signed = {p: _content_sha256_of(p) for p in dict.fromkeys([finding_path, json_path,
                                                                   finding_path.with_suffix(".toml")])
                  if p == finding_path or p.is_file()}
    else:
        raise VerificationError(f"{path}: {schema_problem(schema, SIGNATURE_SCHEMA)}")
    if document.get("public_key") != _public_hex(public_key):
        raise VerificationError(f"{path}: signed by public key {document.get('public_key')}, not by {pubkey_path}")
    for signed_path, finding_sha256 in signed.items():
        try:
            public_key.verify(signature, _signed_message(schema, finding_sha256, chain_head))
        except InvalidSignature:
            raise VerificationError(f"{path}: the signature does not match {signed_path.name} (sha256 "
                                    f"{finding_sha256}) and chain head {chain_head}") from None
    return path
