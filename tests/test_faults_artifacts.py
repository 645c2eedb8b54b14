"""Nothing loaded from results/ can execute code. A real pickle payload (unpickling it
creates a marker file) is planted as each kind of artifact; every loader refuses it
with an error naming the file, and the marker never appears. A source scan keeps
unpickling loaders (pickle, joblib, np.load with allow_pickle, torch.load) out of the
library and the plugin."""

from __future__ import annotations

import ast
import hashlib
import io
import json
import pickle
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

from perfmodel.fit.fitting import load_fit, load_latest_fit, save_fit
from perfmodel.gate.baseline import load_baseline
from perfmodel.trace.overheads import load_all_samples
from perfmodel.fit.predictors import load_predictor
from perfmodel.store.results import ResultStore
from tests.helpers import FUZZ_KEY as KEY, REPO


class Payload:
    """Unpickling this opens ``marker`` for writing: proof that file content ran."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture(params=[pickle.HIGHEST_PROTOCOL, 0], ids=["binary", "ascii"])
def payload(request, tmp_path):
    """(pickle bytes, marker path); protocol 0 is printable ASCII, like a text file."""
    marker = tmp_path / "pwned"
    data = pickle.dumps(Payload(marker), protocol=request.param)
    control = tmp_path / "control"
    pickle.loads(pickle.dumps(Payload(control), protocol=request.param)).close()
    assert control.exists()  # the payload is live: a loader that unpickles would trip it
    return data, marker


@pytest.fixture
def fit_folder(tmp_path, saved_fit):
    folder = tmp_path / "results" / KEY / "predictors" / "run-1"
    folder.mkdir(parents=True)
    for name, content in saved_fit.items():
        (folder / name).write_bytes(content)
    return folder


def npz_with_object_array(marker: Path) -> bytes:
    """A well-formed .npz whose ``rate_`` member is an object array (pickled inside)."""
    buffer = io.BytesIO()
    np.savez(buffer, rate_=np.array([Payload(marker), 1.0], dtype=object),
             overhead_s_=np.array([0.0]))
    return buffer.getvalue()


@pytest.mark.parametrize("target", ["npz", "npz-object-array", "predictor-json", "index"])
def test_planted_pickle_in_a_fit_is_refused(fit_folder, payload, target):
    data, marker = payload
    stem = next(p.stem for p in fit_folder.glob("*.npz"))
    if target == "npz":
        victim, content = fit_folder / f"{stem}.npz", data
    elif target == "npz-object-array":
        victim, content = fit_folder / f"{stem}.npz", npz_with_object_array(marker)
        # Re-sign it, so that only the refusal to unpickle stands between it and a load.
        meta_path = fit_folder / f"{stem}.json"
        meta = json.loads(meta_path.read_text())
        meta["npz_sha256"] = hashlib.sha256(content).hexdigest()
        meta_path.write_text(json.dumps(meta))
    elif target == "predictor-json":
        victim, content = fit_folder / f"{stem}.json", data
    else:
        victim, content = fit_folder / "index.json", data
    victim.write_bytes(content)
    with pytest.raises(ValueError) as info:
        load_fit(fit_folder)
    assert str(victim) in str(info.value)
    if target == "npz-object-array":
        assert "Object arrays cannot be loaded when allow_pickle=False" in str(info.value)
    # The session's path: the newest fit is skipped with the problem, never executed.
    fit, problems = load_latest_fit(ResultStore(fit_folder.parents[2], KEY))
    assert fit is None and len(problems) == 1 and str(victim) in problems[0]
    assert not marker.exists()


def test_npz_member_that_is_a_pickle_is_refused(tmp_path, fit_folder, payload):
    """A zip whose ``.npy`` member is raw pickle bytes, not an array."""
    data, marker = payload
    stem = next(p.stem for p in fit_folder.glob("*.npz"))
    buffer = io.BytesIO()
    with zipfile.ZipFile(fit_folder / f"{stem}.npz") as real, \
            zipfile.ZipFile(buffer, "w") as archive:
        for member in real.namelist():  # the real members, but rate_ is a pickle
            archive.writestr(member, data if member == "rate_.npy" else real.read(member))
    content = buffer.getvalue()
    (fit_folder / f"{stem}.npz").write_bytes(content)
    meta_path = fit_folder / f"{stem}.json"  # re-signed: the sha256 check is not the defence
    meta = json.loads(meta_path.read_text())
    meta["npz_sha256"] = hashlib.sha256(content).hexdigest()
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=rf"{stem}\.(npz|json): .*'rate_' is not a numpy array"):
        load_predictor(fit_folder / stem)
    assert not marker.exists()


def test_planted_pickle_baseline_is_refused(tmp_path, payload):
    data, marker = payload
    path = tmp_path / "baseline-quick.json"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=f"^{path}: baseline is not"):
        load_baseline(path)
    assert not marker.exists()


def test_planted_pickle_run_file_and_overheads_are_skipped(tmp_path, payload):
    data, marker = payload
    store = ResultStore(tmp_path, KEY)
    store.runs_dir.mkdir(parents=True)
    (store.runs_dir / "evil.jsonl").write_bytes(data)
    loaded = store.load()
    assert loaded.records == [] and loaded.problems[0].startswith(str(store.runs_dir / "evil"))
    overheads = store.dir / "overheads"
    overheads.mkdir()
    (overheads / "evil.json").write_bytes(data)
    samples, problems = load_all_samples(overheads)
    assert samples == [] and problems[0].startswith(str(overheads / "evil.json"))
    assert not marker.exists()


def test_planted_pickle_device_cache_is_ignored(tmp_path, payload):
    from perfmodel.device.probe import DEVICE_FILE, _load_cached_cpu_spec

    data, marker = payload
    path = tmp_path / DEVICE_FILE
    path.write_bytes(data)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _load_cached_cpu_spec(path, KEY) is None
    assert any(str(path) in str(w.message) for w in caught)
    assert not marker.exists()


# -- no unpickling loader anywhere in the code that reads results/ ---------------------
UNSAFE_MODULES = {"pickle", "cPickle", "_pickle", "joblib", "dill", "cloudpickle", "shelve",
                  "marshal"}
UNSAFE_CALLS = {("torch", "load"), ("pd", "read_pickle"), ("pandas", "read_pickle"),
                ("np", "fromfile")}


def unsafe_uses(path: Path) -> list[str]:
    """Imports of pickling modules, unpickling calls, and np.load without
    ``allow_pickle=False``, in one source file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module.split(".")[0]]
        found += [f"{path}:{node.lineno}: imports {n}" for n in names if n in UNSAFE_MODULES]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name):
            call = (node.func.value.id, node.func.attr)
            if call in UNSAFE_CALLS:
                found.append(f"{path}:{node.lineno}: calls {'.'.join(call)}")
            if call in (("np", "load"), ("numpy", "load")):
                safe = any(k.arg == "allow_pickle" and isinstance(k.value, ast.Constant)
                           and k.value.value is False for k in node.keywords)
                if not safe:
                    found.append(f"{path}:{node.lineno}: np.load without allow_pickle=False")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("eval", "exec"):
            found.append(f"{path}:{node.lineno}: calls {node.func.id}")
    return found


def test_no_unpickling_loader_in_the_library_or_plugin():
    files = sorted((REPO / "perfmodel").rglob("*.py")) + \
        sorted((REPO / "pytest_perfmodel").rglob("*.py"))
    assert len(files) > 20
    assert [use for f in files for use in unsafe_uses(f)] == []


def test_the_scan_finds_what_it_looks_for(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import pickle\nimport numpy as np\nimport torch\n"
                   "np.load('x')\nnp.load('y', allow_pickle=True)\nnp.load('z', allow_pickle=False)\n"
                   "torch.load('w')\neval('1')\n")
    assert [u.split(": ", 1)[1] for u in unsafe_uses(bad)] == [
        "imports pickle", "np.load without allow_pickle=False",
        "np.load without allow_pickle=False", "calls torch.load", "calls eval"]


def test_saved_fit_holds_only_json_and_plain_arrays(fit_folder):
    """What save_fit writes: JSON, and .npz archives of numeric .npy members only."""
    for path in fit_folder.iterdir():
        if path.suffix == ".json":
            json.loads(path.read_text())
        else:
            assert path.suffix == ".npz"
            with np.load(path, allow_pickle=False) as arrays:
                assert all(arrays[k].dtype.kind in "fiub" for k in arrays.files)


assert save_fit  # the writer whose output the loaders above read
