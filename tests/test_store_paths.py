"""perfmodel/store/paths.py is the one owner of the paths under results/<device-key>/:
no other module of the package joins those names onto a path; and the names it
builds are the ones the stored results use."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from perfmodel.store import paths
from tests.helpers import REPO

PACKAGES = ("perfmodel", "pytest_perfmodel")
OWNER = "perfmodel/store/"

#: Path pieces that only perfmodel/store/paths.py may name: folder names and whole
#: file names, then patterns of file names (f-strings are matched on their literal text).
RESERVED_NAMES = {paths.DEFAULT_ROOT, paths.SPEC_FILE, paths.RUNS, paths.PREDICTORS,
                  paths.FIT_INDEX, paths.OVERHEADS, paths.TRACES, paths.REPORT,
                  paths.REPORT_INDEX, paths.STABILITY, paths.DRIFT, paths.REPLAY,
                  paths.REPLAY_BASELINE}
RESERVED_PATTERNS = (
    re.compile(r"^baseline-"),                     # baseline-<profile>.json
    re.compile(r"^device-"),                       # device-<N>threads.json
    re.compile(r"threads\.json$"),
    re.compile(r"\.jsonl(\.gz)?$"),                # runs/<run-id>.jsonl[.gz]
    re.compile(r"\.(et|kineto|calibration)\.json$"),  # traces/<name>.*.json
    re.compile(r"\.(png|unreadable)$"),            # report figures; set-aside files
    re.compile(r"\.json\.gz$"),                    # replay/<workload>.json.gz
)

#: Offenders waiting for their owners (files being rewritten elsewhere), as
#: {file: {reserved piece, ...}}; each must go (and leave this list) by calling
#: perfmodel.store.paths, e.g. ``paths.stability_file(store.dir, run_id)``.
PENDING = {
    "pytest_perfmodel/plugin.py": {"results"},           # paths.default_root(config.rootpath)
    "perfmodel/session.py": {"results", "stability"},   # paths.DEFAULT_ROOT, store.stability_file
}


def _literal_text(node: ast.AST) -> str | None:
    """The text of a str constant, or the literal parts of an f-string ({} for
    each replacement field); None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def _reserved(text: str) -> str | None:
    """The reserved piece ``text`` (one path component or more) names, or None."""
    for part in re.split(r"[/\\]", text):
        if part in RESERVED_NAMES:
            return part
        for pattern in RESERVED_PATTERNS:
            match = pattern.search(part)
            if match:
                return match.group(0)
    return None


def path_pieces(source: str) -> list[tuple[int, str]]:
    """(line, reserved piece) of every reserved name that ``source`` joins onto a
    path: ``x / "runs"``, ``x / f"baseline-{p}.json"``, ``Path("results")``,
    ``os.path.join(x, "runs")``, ``x.joinpath("runs")``, ``x.with_name("device.json")``,
    ``x.with_suffix(".jsonl")``, or a module-level constant holding one
    (``SPEC = "device.json"``, joined later)."""
    found = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        pieces: list[ast.AST] = []
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            pieces = [node.left, node.right]
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("joinpath", "with_name", "with_suffix", "Path", "PurePath") or (
                    name == "join" and isinstance(func, ast.Attribute)
                    and isinstance(func.value, ast.Attribute) and func.value.attr == "path"):
                pieces = list(node.args)
        for piece in pieces:
            text = _literal_text(piece)
            reserved = _reserved(text) if text is not None else None
            if reserved:
                found.append((piece.lineno, reserved))
    for node in tree.body:  # module constants such as DEVICE_FILE = "device.json"
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            text = _literal_text(node.value)
            if text is not None and "/" not in text and text.endswith(".json") \
                    and _reserved(text):
                found.append((node.lineno, _reserved(text)))
    return found


def package_sources() -> dict[str, str]:
    out = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if not rel.startswith(OWNER):
                out[rel] = path.read_text(encoding="utf-8")
    return out


def test_no_module_but_the_store_builds_results_paths():
    offenders = []
    for rel, source in package_sources().items():
        allowed = PENDING.get(rel, set())
        offenders += [f"{rel}:{line}: joins {piece!r} onto a path; ask perfmodel.store.paths"
                      for line, piece in path_pieces(source) if piece not in allowed]
    assert not offenders, "\n".join(offenders)


def test_pending_offenders_still_exist():
    """An entry of PENDING that its owner fixed must leave the list (a ratchet)."""
    sources = package_sources()
    fixed = []
    for rel, pieces in PENDING.items():
        found = {piece for _, piece in path_pieces(sources.get(rel, ""))}
        fixed += [f"{rel}: {piece!r}" for piece in sorted(pieces - found)]
    assert not fixed, "fixed; remove from PENDING in tests/test_store_paths.py: " + \
        ", ".join(fixed)


@pytest.mark.parametrize("source", [
    'p = root / "runs"',
    'p = store.dir / f"baseline-{profile}.json"',
    'p = folder / "device.json"',
    'p = folder / f"device-{n}threads.json"',
    'p = Path("results")',
    'p = os.path.join(root, key, "predictors")',
    'p = root.joinpath("overheads")',
    'p = d / "stability" / f"{run}.json"',
    'p = d / f"{run}.jsonl"',
    'p = out / f"{name}.kineto.json"',
    'SPEC = "device.json"',
    'p = root / key / "report" / "index.html"',
    'p = folder / "replay" / f"{workload}.json.gz"',
    'p = folder / "replay-baseline.json"',
])
def test_the_check_catches_a_path_built_by_hand(source):
    assert path_pieces(source), source


@pytest.mark.parametrize("source", [
    'p = paths.run_file(store.dir, run_id)',
    'msg = f"no runs under {where}"',
    'p = Path(tmp) / "result.json"',
    'x = "runs"  # a word, not joined',
    'p = tmp / "perfmodel-rank-logs"',
])
def test_the_check_lets_other_paths_and_words_be(source):
    assert not path_pieces(source), source


def test_names_match_the_layout(tmp_path):
    folder = paths.device_dir(tmp_path, "cpu-x-2c")
    assert folder == tmp_path / "cpu-x-2c"
    rel = {name: path.relative_to(folder).as_posix() for name, path in {
        "spec": paths.spec_file(folder), "threads": paths.threads_spec_file(folder, 1),
        "run": paths.run_file(folder, "r1"), "fit": paths.fit_dir(folder, "r1"),
        "index": paths.fit_index(paths.fit_dir(folder, "r1")),
        "baseline": paths.baseline_file(folder, "quick"),
        "overhead": paths.overhead_file(folder, "mlp_small"),
        "stability": paths.stability_file(folder, "r1"), "drift": paths.drift_file(folder, "r1"),
        "report": paths.report_index(folder),
        "replay": paths.replay_file(folder, "dlrm_mp@2"),
        "replay_baseline": paths.replay_baseline_file(folder)}.items()}
    assert rel == {"spec": "device.json", "threads": "device-1threads.json",
                   "run": "runs/r1.jsonl", "fit": "predictors/r1", "index": "predictors/r1/index.json",
                   "baseline": "baseline-quick.json", "overhead": "overheads/mlp_small.json",
                   "stability": "stability/r1.json", "drift": "drift/r1.json",
                   "report": "report/index.html", "replay": "replay/dlrm_mp@2.json.gz",
                   "replay_baseline": "replay-baseline.json"}
    et, kineto, calibration = paths.trace_files(paths.traces_dir(folder), "w.rank0")
    assert (et.name, kineto.name, calibration.name) == (
        "w.rank0.et.json", "w.rank0.kineto.json", "w.rank0.calibration.json")
    assert et.parent == folder / "traces"


def test_listings_read_back_what_the_names_build(tmp_path):
    folder = paths.device_dir(tmp_path, "cpu-x-2c")
    for run in ("r2", "r1"):
        paths.run_file(folder, run).parent.mkdir(parents=True, exist_ok=True)
        paths.run_file(folder, run).write_text("")
        paths.fit_dir(folder, run).mkdir(parents=True)
    paths.baseline_file(folder, "quick").write_text("{}")
    paths.threads_spec_file(folder, 4).write_text("{}")
    paths.device_dir(tmp_path, "empty").mkdir()
    assert [paths.run_id_of(p) for p in paths.run_files(folder)] == ["r1", "r2"]
    assert [p.name for p in paths.fit_dirs(folder)] == ["r1", "r2"]
    assert paths.baseline_files(folder) == {"quick": paths.baseline_file(folder, "quick")}
    assert paths.threads_spec_files(folder) == {4: paths.threads_spec_file(folder, 4)}
    assert paths.device_keys(tmp_path) == ["cpu-x-2c"]
    assert paths.device_keys(tmp_path / "missing") == []
    assert paths.replay_files(folder) == {}
    for workload in ("mlp_small", "dlrm_mp@2"):
        paths.replay_file(folder, workload).parent.mkdir(parents=True, exist_ok=True)
        paths.replay_file(folder, workload).write_bytes(b"")
    assert paths.replay_files(folder) == {w: paths.replay_file(folder, w)
                                          for w in ("dlrm_mp@2", "mlp_small")}


@pytest.mark.parametrize("bad", ["", "..", "a/b", "a\\b"])
def test_names_reject_separators(tmp_path, bad):
    with pytest.raises(ValueError):
        paths.run_file(tmp_path, bad)
