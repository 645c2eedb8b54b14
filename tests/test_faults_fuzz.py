"""Fuzzing every loader of results/ and of the settings: each one either loads or
raises the project's own error naming the file, never another exception type.

Case counts: run with ``--hypothesis-show-statistics``; each test's
``max_examples`` is the number of cases it tries (``derandomize=True``: the
same cases every run, so CI cannot flake on a newly found example).
"""

from __future__ import annotations

import json
import math
import os
import string

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from perfmodel.fit.fitting import load_fit, samples_from_records
from perfmodel.gate.baseline import load_baseline, save_baseline
from perfmodel.settings import SettingsError, load_settings
from perfmodel.store.results import SCHEMA_VERSION, ResultStore
from tests.helpers import FUZZ_KEY as KEY, json_values, mutate

#: Cases per fuzz test; ``PERFMODEL_FUZZ_EXAMPLES=2000`` for a longer hunt.
EXAMPLES = int(os.environ.get("PERFMODEL_FUZZ_EXAMPLES", "200"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow,
                                       HealthCheck.function_scoped_fixture])


def as_text(doc) -> str:
    return json.dumps(doc, allow_nan=True)


def raw_or_json(data, valid_doc):
    """File bytes: arbitrary bytes, arbitrary JSON, a mutated valid document, or a
    valid document cut short."""
    choice = data.draw(st.sampled_from(["bytes", "json", "mutated", "cut"]))
    if choice == "bytes":
        return data.draw(st.binary(max_size=300))
    if choice == "json":
        return as_text(data.draw(json_values)).encode()
    text = as_text(valid_doc if choice == "cut" else mutate(data, valid_doc)).encode()
    if choice == "cut":
        return text[:data.draw(st.integers(0, max(0, len(text) - 1)))]
    return text


# -- run files (ResultStore.load) ------------------------------------------------------
HEADER = {"kind": "header", "schema": SCHEMA_VERSION, "run_id": "r1", "device_key": KEY,
          "created_unix_s": 1.0, "profile": "smoke", "env": {}}
RECORD = {"kind": "measurement", "op": "addmm", "direction": "forward", "dtype": "float32",
          "config": {"M": 8, "N": 8, "K": 8}, "replicate": 0,
          "measurement": {"median_s": 1e-5, "iqr_s": 1e-7, "n": 20}, "env": {}}


@FUZZ
@given(data=st.data())
def test_run_file_loader_reports_by_path_and_keeps_the_good_file(tmp_path_factory, data):
    store = ResultStore(tmp_path_factory.mktemp("store"), KEY)
    good = store.open_run({}, "smoke", run_id="00-good")
    for replicate in range(2):
        good.append({**RECORD, "replicate": replicate})
    good.close()
    which = data.draw(st.sampled_from(["header", "record", "file"]))
    if which == "file":
        body = raw_or_json(data, HEADER)
    else:
        header = mutate(data, HEADER) if which == "header" else HEADER
        record = mutate(data, RECORD) if which == "record" else RECORD
        body = (as_text(header) + "\n" + as_text(record) + "\n").encode()
    bad = store.runs_dir / "zz-fuzzed.jsonl"
    bad.write_bytes(body)
    loaded = store.load()
    assert [r["run_id"] for r in loaded.records].count("00-good") == 2
    for problem in loaded.problems:
        assert problem.startswith(str(bad)), problem
    # What the store hands out is fit to use: grouping it into samples never fails.
    samples_from_records(loaded.records)


# -- baselines (gate.load_baseline) ----------------------------------------------------
@FUZZ
@given(data=st.data())
def test_baseline_loader_loads_or_names_the_file(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("baseline") / "baseline-smoke.json"
    save_baseline(path, KEY, {"mlp_small": [0.01, 0.03, -0.02], "dlrm_random": [0.1]}, {"a": 1},
                  created_unix_s=1.7e9)
    valid = json.loads(path.read_text())
    path.write_bytes(raw_or_json(data, valid))
    try:
        baseline = load_baseline(path)
    except ValueError as exc:
        assert type(exc) is ValueError and str(exc).startswith(str(path)), exc
        return
    for entry in baseline.entries.values():  # what loads is usable by the gate
        assert math.isfinite(entry.mean) and math.isfinite(entry.spread) and entry.spread >= 0


# -- fitted predictors (fitting.load_fit; the saved_fit fixture is in conftest.py) -----
@FUZZ
@given(data=st.data())
def test_fit_loader_loads_or_names_the_file(tmp_path_factory, saved_fit, data):
    folder = tmp_path_factory.mktemp("predictors") / "run-1"
    folder.mkdir()
    for name, content in saved_fit.items():
        (folder / name).write_bytes(content)
    target = data.draw(st.sampled_from(sorted(saved_fit)))  # index, predictor json or npz
    if target.endswith(".npz"):
        content = bytearray(saved_fit[target])
        for _ in range(data.draw(st.integers(1, 4))):  # flip bytes, or cut
            pos = data.draw(st.integers(0, len(content) - 1))
            content[pos] = data.draw(st.integers(0, 255))
        (folder / target).write_bytes(bytes(content[:data.draw(st.integers(0, len(content)))]))
    else:
        (folder / target).write_bytes(raw_or_json(data, json.loads(saved_fit[target])))
    try:
        report = load_fit(folder)
    except ValueError as exc:
        assert str(folder) in str(exc), exc
        return
    for predictor in report.predictors.values():  # what loads predicts
        assert np.all(np.isfinite(predictor.predict("float32", [{"M": 8, "N": 8, "K": 8}])))


# -- settings (settings.load_settings) -------------------------------------------------
KEYS = ["default_gmae_threshold", "smoke_gmae_threshold", "e2e_spread_k", "e2e_min_margin",
        "e2e_spread_confidence",
        "baseline_runs", "gmae_thresholds", "e2e_ceilings", "e2e_tolerance", "colour"]
toml_scalars = st.one_of(
    st.integers(-5, 20).map(str), st.floats(-1, 20, allow_nan=False).map(repr),
    st.sampled_from(["nan", "inf", "-inf", "true", "false", '"0.1"', "[]", "[0.1, 2]", "{}",
                     "1979-05-27", '{ x = 1 }']))
names = st.sampled_from(['"addmm.forward"', '"linear.backward"', '"conv9d.forward"',
                         '"addmm"', '"addmm.sideways"', "mlp_small", "nope", '""'])


@st.composite
def toml_documents(draw):
    lines = []
    for _ in range(draw(st.integers(0, 4))):
        table = draw(st.sampled_from(["[tool.perfmodel]", "[tool.perfmodel.gmae_thresholds]",
                                      "[tool.perfmodel.e2e_ceilings]", "[tool]", "[project]"]))
        lines.append(table)
        for _ in range(draw(st.integers(0, 3))):
            key = draw(st.sampled_from(KEYS) if table in ("[tool.perfmodel]", "[tool]")
                       else names)
            if table == "[tool]":
                key = draw(st.sampled_from(["perfmodel", "other"]))
            lines.append(f"{key} = {draw(toml_scalars)}")
    text = "\n".join(lines) + "\n"
    if draw(st.booleans()):  # and sometimes not TOML at all, or cut short
        text = draw(st.sampled_from([text[:draw(st.integers(0, len(text)))],
                                     draw(st.text(alphabet=string.printable, max_size=40))]))
    return text


@FUZZ
@given(text=toml_documents(), raw=st.none() | st.binary(max_size=40))
def test_settings_loader_loads_or_names_the_file(tmp_path_factory, text, raw):
    path = tmp_path_factory.mktemp("settings") / "pyproject.toml"
    path.write_bytes(raw if raw is not None else text.encode())
    try:
        loaded = load_settings(path)
    except SettingsError as exc:
        assert str(exc).startswith(str(path)) and "\n" not in str(exc), exc
        return
    for value in (loaded.default_gmae_threshold, loaded.smoke_gmae_threshold,
                  loaded.e2e_spread_k, loaded.e2e_min_margin,
                  *loaded.gmae_thresholds.values(), *loaded.e2e_ceilings.values()):
        assert math.isfinite(value) and value >= 0
    loaded.gate_policy()  # what loads makes a valid gate policy
