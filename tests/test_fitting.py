"""Fitting on planted measurements: splits, noise floor, choice, persistence."""

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfmodel.device.spec import DeviceSpec
from perfmodel.fit.fitting import (MIN_CONFIGS, extrapolation_split, fit_predictors, load_fit,
                               load_latest_fit, random_folds, save_fit)
from perfmodel.ops import get_op
from perfmodel.store.results import ResultStore
from tests.helpers import SPEC, planted_records, save_uncompressed


def test_splits_hold_out_unseen_configs():
    keys = list(range(40))
    folds = random_folds(keys)
    assert len(folds) == 4 and set().union(*folds) == set(keys)
    assert sum(map(len, folds)) == 40 and all(len(f) == 10 for f in folds)  # disjoint
    train, test = extrapolation_split(keys, size_of=lambda k: -k)
    assert test == set(range(8))  # the largest by size_of


def test_fit_recovers_planted_device_and_reports_noise_floor():
    report = fit_predictors(planted_records(noise=0.01), SPEC)
    assert set(report.accuracy) == {("linear", "forward"), ("linear", "backward")}
    for acc in report.accuracy.values():
        assert acc.gmae < 0.05 and acc.gmae_extrapolation < 0.05
        assert acc.n_noise_pairs == acc.n_configs
        # two replicates with 1% Gaussian noise: floor near 1.1%, well above 4e-4
        assert 0.003 < acc.noise_floor < 0.03
        assert acc.chosen in acc.candidates and acc.reason


def test_noise_floor_tracks_planted_noise():
    quiet = fit_predictors(planted_records(noise=0.005), SPEC).accuracy
    loud = fit_predictors(planted_records(noise=0.05), SPEC).accuracy
    for key in quiet:
        assert loud[key].noise_floor > 3 * quiet[key].noise_floor


def test_too_few_configs_is_reported_not_raised():
    few = [r for r in planted_records("bmm") if r["dtype"] == "float32"
           and r["direction"] == "forward"][: 2 * (MIN_CONFIGS - 1)]
    report = fit_predictors(few, SPEC, only=[("bmm", "forward"), ("addmm", "forward")])
    assert "3 distinct configs measured, need at least 4" in report.skipped[("bmm", "forward")]
    assert "0 distinct configs" in report.skipped[("addmm", "forward")]
    with pytest.raises(LookupError, match="bmm.forward"):
        report.predictor("bmm", "forward")


def test_fit_records_its_largest_config_and_measures_calls_beyond_it(tmp_path):
    records = planted_records()
    report = fit_predictors(records, SPEC)
    acc = report.accuracy[("linear", "forward")]
    op = get_op("linear")
    fitted = [r["config"] for r in records if r["direction"] == "forward"]
    assert acc.largest_flops == max(op.flops(c, "forward") for c in fitted)
    assert acc.largest_bytes == max(op.bytes_moved(c, r["dtype"], "forward")
                                    for c, r in zip(fitted, (r for r in records
                                                             if r["direction"] == "forward")))
    biggest = max(fitted, key=lambda c: op.flops(c, "forward"))
    assert acc.beyond(biggest, "float32") == pytest.approx(1.0)
    # 16 times the batch: 16 times the FLOPs; the bytes grow less
    assert acc.beyond({**biggest, "B": 16 * biggest["B"]}, "float32") == pytest.approx(16.0)
    store = ResultStore(tmp_path, SPEC.key)
    loaded = load_fit(save_fit(report, store, "run-1")).accuracy[("linear", "forward")]
    assert (loaded.largest_flops, loaded.largest_bytes) == (acc.largest_flops, acc.largest_bytes)
    # fits saved before the range was recorded cannot tell
    index = json.loads((store.predictors_dir / "run-1" / "index.json").read_text())
    for entry in index["entries"]:
        del entry["accuracy"]["largest_flops"], entry["accuracy"]["largest_bytes"]
    (store.predictors_dir / "run-1" / "index.json").write_text(json.dumps(index))
    old = load_fit(store.predictors_dir / "run-1").accuracy[("linear", "forward")]
    assert old.beyond(biggest, "float32") is None


@pytest.fixture(scope="module")
def planted_fit():
    return fit_predictors(planted_records(), SPEC)


@given(index=st.integers(0, 10_000), direction=st.sampled_from(["forward", "backward"]))
def test_no_fitted_config_is_beyond_its_own_fit(planted_fit, index, direction):
    acc = planted_fit.accuracy[("linear", direction)]
    cases = [c for c in get_op("linear").cases("quick") if c.direction == direction]
    case = cases[index % len(cases)]
    assert 0.0 < acc.beyond(case.params, case.dtype) <= 1.0


def test_saved_fit_predicts_the_same(tmp_path):
    report = fit_predictors(planted_records(), SPEC)
    store = ResultStore(tmp_path, SPEC.key)
    folder = save_fit(report, store, "run-1")
    loaded, problems = load_latest_fit(store)
    assert problems == [] and set(loaded.predictors) == set(report.predictors)
    configs = [{"B": 256, "IN": 1024, "OUT": 1024}, {"B": 8, "IN": 8, "OUT": 8}]
    for key, predictor in report.predictors.items():
        np.testing.assert_array_equal(loaded.predictors[key].predict("float32", configs),
                                      predictor.predict("float32", configs))
        assert loaded.accuracy[key].gmae == report.accuracy[key].gmae
    # A predictor fitted before its op gained a param is skipped, with the reason.
    from perfmodel.fit.fitting import FitReport, fit_op, samples_from_records

    key = ("linear", "forward")
    shaped = FitReport()
    shaped.predictors[key], shaped.accuracy[key] = fit_op(
        *key, samples_from_records(planted_records())[key], SPEC, kinds=["shape"])
    op = get_op("linear")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(type(op), "params", op.params + ("EXTRA",))
        patch.setattr(type(op), "param_defaults", {**op.param_defaults, "EXTRA": 1})
        stale = load_fit(save_fit(shaped, store, "run-0"))
    assert key not in stale.predictors and "re-run" in stale.skipped[key]
    assert stale.stale == (key,) and loaded.stale == ()  # a session refits a stale fit
    # So is one chosen among other kinds than today's (a kind added since), and
    # one saved before the index recorded them.
    import perfmodel.fit.fitting as fitting

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fitting, "candidate_kinds", lambda op, direction: ("roofline",))
        older = save_fit(shaped, store, "run-1")
    newer = load_fit(older)
    assert newer.stale == (key,) and "(roofline) than today's (roofline, shape" in \
        newer.skipped[key]
    index = json.loads((older / "index.json").read_text())
    for entry in index["entries"]:
        del entry["candidate_kinds"]
    (older / "index.json").write_text(json.dumps(index))
    assert "(not recorded)" in load_fit(older).skipped[key]
    # A tampered index (a path escaping the folder) is refused with the file named.
    index = json.loads((folder / "index.json").read_text())
    index["entries"][0]["stem"] = "../../evil"
    (folder / "index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match="index.json"):
        load_fit(folder)


def test_analytical_embedding_model_is_a_candidate_only_where_it_applies():
    from perfmodel.fit.fitting import candidate_kinds, make_predictor

    assert "embedding_analytic" in candidate_kinds(get_op("tbe_sgd"), "backward")
    assert "embedding_analytic" not in candidate_kinds(get_op("addmm"), "forward")
    model = make_predictor("embedding_analytic", SPEC, get_op("tbe_rowwise_adagrad"), "backward")
    assert model.kind == "backward_rowwise_adagrad" and model.spec == SPEC


def test_choice_prefers_random_split_and_breaks_ties_by_extrapolation():
    from perfmodel.fit.fitting import choose_kind

    chosen, why = choose_kind({"shape": {"gmae": 0.50, "gmae_extrapolation": 1.0},
                               "efficiency": {"gmae": 0.30, "gmae_extrapolation": 1.4}})
    assert chosen == "efficiency" and "efficiency 30.0% (extrap 140.0%)" in why
    chosen, _ = choose_kind({"shape": {"gmae": 0.105, "gmae_extrapolation": 0.2},
                             "efficiency": {"gmae": 0.100, "gmae_extrapolation": 0.4}})
    assert chosen == "shape"  # within the 2-point tie, it extrapolates better


def test_between_runs_noise_floor_pairs_first_and_last_run():
    from perfmodel.fit.fitting import Sample, between_runs_noise_floor

    def s(run, seconds, replicate=0, n=8):
        return Sample("float32", (("N", n),), seconds, run, replicate)

    samples = [s("r1", 1.0), s("r1", 5.0, replicate=1), s("r2", 9.0), s("r3", 1.1),
               s("r1", 2.0, n=16)]  # N=16 was measured in one run only
    floor = between_runs_noise_floor(samples)
    assert floor == pytest.approx((0.1 / 1.1 + 0.1 / 1.0) / 2 + 4e-4, rel=1e-6)  # symmetric
    assert between_runs_noise_floor([s("r1", 1.0), s("r1", 1.2, replicate=1)]) is None


# -- fits per thread count --------------------------------------------------------

SPEC_1T = DeviceSpec(**{**SPEC.to_dict(), "threads": 1})


def threaded_records(threads, run_id, seconds_scale=1.0):
    """The first 8 forward configs of ``planted_records`` (few enough that only the
    roofline is fitted: fast) measured at ``threads`` torch threads in ``run_id``."""
    forward = [r for r in planted_records() if r["direction"] == "forward"][:16]
    return [{**r, "run_id": run_id, "env": {"threads": threads},
             "measurement": {"median_s": r["measurement"]["median_s"] * seconds_scale}}
            for r in forward]


def test_a_saved_fit_records_its_thread_count(tmp_path):
    store = ResultStore(tmp_path, SPEC.key)
    fit = fit_predictors(threaded_records(1, "r1"), SPEC_1T)
    assert fit.threads == 1
    folder = save_fit(fit, store, "f1", ["r1"])
    assert json.loads((folder / "index.json").read_text())["threads"] == 1
    assert load_fit(folder).threads == 1


def test_latest_fit_of_a_thread_count(tmp_path):
    store = ResultStore(tmp_path, SPEC.key)
    records = threaded_records(2, "r2") + threaded_records(1, "r1")
    save_fit(fit_predictors(records, SPEC_1T), store, "2026a", ["r1"])
    save_fit(fit_predictors(records, SPEC), store, "2026b", ["r2"])
    old = save_fit(fit_predictors(records, SPEC), store, "2026c", ["r2"])
    index = json.loads((old / "index.json").read_text())
    del index["threads"]  # saved before thread counts were recorded
    (old / "index.json").write_text(json.dumps(index))
    assert load_latest_fit(store, threads=1)[0].data_runs == ("r1",)
    assert load_latest_fit(store, threads=2)[0].data_runs == ("r2",)
    assert load_latest_fit(store, threads=3)[0] is None
    latest = load_latest_fit(store)[0]  # any thread count: the newest, old ones included
    assert latest.threads is None and latest.data_runs == ("r2",)


def test_a_fit_of_another_thread_count_is_passed_over_unread(tmp_path):
    store = ResultStore(tmp_path, SPEC.key)
    records = threaded_records(2, "r2") + threaded_records(1, "r1")
    save_fit(fit_predictors(records, SPEC), store, "2026a", ["r2"])
    newer = save_fit(fit_predictors(records, SPEC_1T), store, "2026b", ["r1"])
    for member in newer.glob("*.npz"):  # its predictors would not load
        member.write_bytes(b"not an npz")
    fit, problems = load_latest_fit(store, threads=2)
    assert fit.data_runs == ("r2",) and problems == []
    fit, problems = load_latest_fit(store, threads=1)  # asked for: loaded and refused
    assert fit is None or fit.data_runs != ("r1",)
    assert any("2026b" in p for p in problems)


def test_a_bad_thread_count_in_an_index_is_named(tmp_path):
    folder = save_fit(fit_predictors(threaded_records(1, "r1"), SPEC_1T),
                      ResultStore(tmp_path, SPEC.key), "f1", ["r1"])
    index = json.loads((folder / "index.json").read_text())
    (folder / "index.json").write_text(json.dumps({**index, "threads": 0}))
    with pytest.raises(ValueError, match="'threads' must be null or an int >= 1"):
        load_fit(folder)


def test_session_fits_and_reuses_per_its_own_thread_count(tmp_path):
    """A 1-thread session trains on the 1-thread runs only, saves that fit, and
    never reuses it at 2 threads (nor the 2-thread fit at 1)."""
    from pathlib import Path

    from perfmodel.settings import Settings
    from pytest_perfmodel.session import Options, PerfmodelSession

    from perfmodel.measure.allocator import allocator_policy

    store = ResultStore(tmp_path, SPEC.key)
    for threads, run_id, scale in ((1, "r1", 2.0), (2, "r2", 1.0)):
        # measured under this process's allocator policy, which the session fits on
        writer = store.open_run({"threads": threads, "cpu_allocator": allocator_policy()},
                                "quick", run_id)
        for record in threaded_records(threads, run_id, scale):
            env = {**record["env"], "cpu_allocator": allocator_policy()}
            writer.append({**{k: v for k, v in record.items() if k != "run_id"}, "env": env})
        writer.close()

    def session(spec):
        options = Options(None, "quick", tmp_path, spec.threads, False, 1.0, 0.05, False)
        s = PerfmodelSession(options, Settings(), Path(tmp_path))
        s._device = spec
        return s

    def saved():
        return sorted(p.name for p in store.predictors_dir.iterdir())

    one = session(SPEC_1T).fit()
    assert one.threads == 1 and one.data_runs == ("r1",) and len(saved()) == 1
    two = session(SPEC).fit()
    assert two.threads == 2 and two.data_runs == ("r2",) and len(saved()) == 2
    case = next(c for c in get_op("linear").cases("quick") if c.direction == "forward")
    params = [case.params]
    assert one.predictor(case.op, case.direction).predict(case.dtype, params)[0] > \
        1.5 * two.predictor(case.op, case.direction).predict(case.dtype, params)[0]
    again = session(SPEC_1T).fit()  # reused, not refitted
    assert again.data_runs == ("r1",) and len(saved()) == 2


def test_a_cpu_fit_trains_only_on_its_allocator_policy():
    """Records of another host allocator policy (or of none recorded: the default)
    are left out when a policy is asked for; collectives are kept whatever theirs."""
    from perfmodel.measure.allocator import DEFAULT, KEEP_FREED
    from perfmodel.fit.fitting import fit_run_ids

    def under(policy, run_id, scale):
        env = {"threads": 2} if policy is None else {"threads": 2, "cpu_allocator": policy}
        return [{**r, "env": env} for r in threaded_records(2, run_id, scale)]

    collective = {"kind": "measurement", "op": "all_reduce", "direction": "forward",
                  "dtype": "float32", "config": {"world_size": 2, "bytes": 64}, "replicate": 0,
                  "run_id": "c", "measurement": {"median_s": 1e-4}, "env": {"threads": 1}}
    records = under(None, "old", 3.0) + under(KEEP_FREED, "kept", 1.0) + [collective]
    assert fit_run_ids(records, SPEC, KEEP_FREED) == ["c", "kept"]
    assert fit_run_ids(records, SPEC, DEFAULT) == ["c", "old"]
    assert fit_run_ids(records, SPEC) == ["c", "kept", "old"]
    case = next(c for c in get_op("linear").cases("quick") if c.direction == "forward")
    kept = fit_predictors(records, SPEC, only=[("linear", "forward")], allocator=KEEP_FREED)
    old = fit_predictors(records, SPEC, only=[("linear", "forward")], allocator=DEFAULT)
    assert kept.accuracy[("linear", "forward")].n_configs == 8
    predict = [f.predictor(case.op, case.direction).predict(case.dtype, [case.params])[0]
               for f in (kept, old)]
    assert predict[1] > 2.5 * predict[0]


def test_a_cpu_fit_trains_only_on_the_cache_state_its_op_is_timed_in():
    """An op timed cold on a CPU (an optimizer step) is fitted on cold records only
    (a record with no cache state is a hot one); a hot op on hot ones; off a CPU
    the cache state is the timer's business."""
    from perfmodel.fit.fitting import fit_run_ids

    def record(op, run_id, cache=None):
        measurement = {"median_s": 1e-3} if cache is None else {"median_s": 1e-3, "cache": cache}
        return {"kind": "measurement", "op": op, "direction": "forward", "dtype": "float32",
                "config": {"NTENSORS": 4, "NUMEL": 1024} if op == "sgd_foreach" else
                {"B": 8, "IN": 8, "OUT": 8}, "replicate": 0, "run_id": run_id,
                "measurement": measurement, "env": {"threads": 2}}

    assert get_op("sgd_foreach").cold_on_cpu and not get_op("linear").cold_on_cpu
    records = [record("sgd_foreach", "old"), record("sgd_foreach", "hot", "hot"),
               record("sgd_foreach", "cold", "cold"), record("linear", "lin-hot", "hot"),
               record("linear", "lin-cold", "cold")]
    assert fit_run_ids(records, SPEC) == ["cold", "lin-hot"]
    gpu = DeviceSpec(**{**SPEC.to_dict(), "kind": "cuda", "key": "cuda-planted"})
    assert fit_run_ids(records, gpu) == ["cold", "hot", "lin-cold", "lin-hot", "old"]


def test_a_gpu_fit_leaves_out_hot_timings_of_the_launches():
    """Off a CPU, hot records timed with ``cuda_event`` (before the device hold)
    timed the host's launches and are left out; queued hot, cold and unlabelled
    ones stay."""
    from perfmodel.fit.fitting import fit_run_ids

    def record(run_id, timer=None, cache="hot"):
        measurement = {"median_s": 1e-3, "cache": cache} | ({"timer": timer} if timer else {})
        return {"kind": "measurement", "op": "linear", "direction": "forward",
                "dtype": "float32", "config": {"B": 8, "IN": 8, "OUT": 8}, "replicate": 0,
                "run_id": run_id, "measurement": measurement, "env": {}}

    records = [record("launches", "cuda_event"), record("queued", "cuda_event_queued"),
               record("cold", "cuda_event", "cold"), record("unlabelled")]
    gpu = DeviceSpec(**{**SPEC.to_dict(), "kind": "cuda", "key": "cuda-planted"})
    assert fit_run_ids(records, gpu) == ["cold", "queued", "unlabelled"]


def test_a_remeasured_config_is_fitted_on_its_newest_run_only():
    """A config measured again (another session, perhaps another host behind the
    same device key) replaces its older timings; configs measured once keep
    theirs; the older run still feeds the between-runs noise floor."""
    from perfmodel.fit.fitting import Sample, newest_per_config

    old = threaded_records(2, "20261101T000000Z-1-aaaa", 3.0)
    new = threaded_records(2, "20261123T000000Z-2-bbbb", 1.0)
    records = old + new
    case = next(c for c in get_op("linear").cases("quick") if c.direction == "forward")
    fitted = fit_predictors(records, SPEC, only=[("linear", "forward")])
    alone = fit_predictors(new, SPEC, only=[("linear", "forward")])
    predict = [f.predictor(case.op, case.direction).predict(case.dtype, [case.params])[0]
               for f in (fitted, alone)]
    assert predict[0] == pytest.approx(predict[1], rel=1e-9)
    accuracy = fitted.accuracy[("linear", "forward")]
    assert accuracy.n_samples == len(new)
    assert accuracy.noise_floor_runs > 0.5  # the 3x older run

    def s(run, n):
        return Sample("float32", (("N", n),), 1.0, run, 0)

    kept = newest_per_config([s("r1", 8), s("r2", 8), s("r1", 16)])
    assert kept == [s("r2", 8), s("r1", 16)]


@given(st.lists(st.tuples(st.sampled_from(["r1", "r2", "r3", "r4"]),
                          st.sampled_from([None, 0, 1, 3])), min_size=1, max_size=12))
def test_a_config_keeps_its_newest_run_timed_alone_over_newer_shared_ones(runs):
    """Per config: the newest run timed alone (``timed_beside`` 0) if any, else the
    newest whose records do not say, else the newest timed beside others; every
    sample of that one run is kept."""
    from perfmodel.fit.fitting import Sample, newest_per_config

    samples = [Sample("float32", (("N", 8),), 1.0 + i, run, i, None, beside)
               for i, (run, beside) in enumerate(runs)]
    kept = newest_per_config(samples)
    for wanted in (lambda b: b == 0, lambda b: b is None, lambda b: True):
        candidates = [s.run_id for s in samples if wanted(s.timed_beside)]
        if candidates:
            run = max(candidates)
            break
    assert {s.run_id for s in kept} == {run}
    assert len(kept) == sum(1 for s in samples if s.run_id == run)


def test_a_fit_keeps_the_host_speed_of_the_measurements_it_trained_on(tmp_path):
    """The median over the newest measurement of each config; an older run
    (re-measured since) and records without a host speed do not count; saved
    and loaded with the fit; a malformed one in an index is named."""
    def with_speed(records, addmm, copy):
        return [{**r, "host_speed": {"addmm": addmm, "copy": copy}} for r in records]

    old = with_speed(threaded_records(1, "20261101T000000Z-1-aaaa"), 9.0, 9.0)
    new = threaded_records(1, "20261123T000000Z-2-bbbb")
    new = with_speed(new[:10], 2e-3, 1e-3) + with_speed(new[10:14], 4e-3, 3e-3) + new[14:]
    fit = fit_predictors(old + new, SPEC_1T)
    assert fit.host_speed.seconds == {"addmm": 2e-3, "copy": 1e-3}
    assert fit_predictors(threaded_records(1, "r1"), SPEC_1T).host_speed is None
    folder = save_fit(fit, ResultStore(tmp_path, SPEC.key), "f1", ["r"])
    assert load_fit(folder).host_speed == fit.host_speed
    index = json.loads((folder / "index.json").read_text())
    (folder / "index.json").write_text(json.dumps({**index, "host_speed": {"addmm": 1.0}}))
    with pytest.raises(ValueError, match="index.json: 'host_speed': host_speed must map"):
        load_fit(folder)


def test_saved_arrays_are_compressed_and_uncompressed_ones_still_load(tmp_path):
    """Fits are stored with np.savez_compressed; a fit saved before (np.savez) loads
    and predicts the same."""
    import hashlib
    import io
    import zipfile

    from perfmodel.fit.fitting import FitReport, fit_op, samples_from_records
    from perfmodel.fit.predictors import load_predictor

    key = ("linear", "forward")
    report = FitReport()
    samples = samples_from_records(planted_records())[key]
    report.predictors[key], report.accuracy[key] = fit_op(*key, samples, SPEC, kinds=("shape",))
    folder = save_fit(report, ResultStore(tmp_path, SPEC.key), "run-1")
    npz, meta = folder / "linear-forward.npz", folder / "linear-forward.json"
    with zipfile.ZipFile(npz) as archive:
        assert {i.compress_type for i in archive.infolist()} == {zipfile.ZIP_DEFLATED}
    configs = [{"B": 256, "IN": 1024, "OUT": 1024}, {"B": 8, "IN": 8, "OUT": 8}]
    expected = report.predictors[key].predict("float32", configs)
    # rewrite it as an older perfmodel did: uncompressed, its checksum in the metadata
    with np.load(npz, allow_pickle=False) as loaded:
        arrays = {name: loaded[name] for name in loaded.files}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    old = buffer.getvalue()
    assert len(old) > npz.stat().st_size
    npz.write_bytes(old)
    document = json.loads(meta.read_text())
    document["npz_sha256"] = hashlib.sha256(old).hexdigest()
    meta.write_text(json.dumps(document))
    with zipfile.ZipFile(npz) as archive:
        assert {i.compress_type for i in archive.infolist()} == {zipfile.ZIP_STORED}
    assert load_predictor(folder / "linear-forward").n_features_in_ > 0
    np.testing.assert_array_equal(load_fit(folder).predictors[key].predict("float32", configs),
                                  expected)


@pytest.mark.parametrize("workers", [1, 2])
def test_refitting_the_same_records_gives_the_same_predictions(workers):
    """Every random choice of a fit is seeded: the same records give the same fit,
    fitted here or in forked worker processes."""
    records = planted_records("linear") + planted_records("relu")
    first, second = fit_predictors(records, SPEC, workers=1), \
        fit_predictors(records, SPEC, workers=workers)
    assert set(first.predictors) == set(second.predictors) and first.predictors
    for key, predictor in first.predictors.items():
        op = get_op(key[0])
        configs = [dict(c.params) for c in op.cases("quick") if c.direction == key[1]][:5]
        dtype = op.dtypes[0]
        assert predictor.kind == second.predictors[key].kind
        np.testing.assert_array_equal(predictor.predict(dtype, configs),
                                      second.predictors[key].predict(dtype, configs))
        assert first.accuracy[key] == second.accuracy[key]


def test_compressing_an_old_fit_keeps_its_predictions(tmp_path):
    """compress_fit rewrites a fit saved uncompressed; it loads and predicts the same."""
    import zipfile

    from perfmodel.fit.fitting import compress_fit

    report = fit_predictors(planted_records(), SPEC)
    folder = save_fit(report, ResultStore(tmp_path, SPEC.key), "run-1")
    save_uncompressed(folder)  # as an older perfmodel saved it
    configs = [{"B": 256, "IN": 1024, "OUT": 1024}, {"B": 8, "IN": 8, "OUT": 8}]
    expected = {k: p.predict("float32", configs) for k, p in load_fit(folder).predictors.items()}
    before, after = compress_fit(folder)
    assert after < before == sum(p.stat().st_size for p in folder.glob("*.npz")) + before - after
    for npz in folder.glob("*.npz"):
        with zipfile.ZipFile(npz) as archive:
            assert {i.compress_type for i in archive.infolist()} == {zipfile.ZIP_DEFLATED}
    loaded = load_fit(folder)
    for key, values in expected.items():
        np.testing.assert_array_equal(loaded.predictors[key].predict("float32", configs), values)
    assert compress_fit(folder) == (after, after)  # already compressed: left as it is


# -- stale fits and `perfmodel refit` ------------------------------------------------------


def _store_runs(store, runs):
    """Write ``runs`` ({run id: (env, records)}) as run files of ``store``."""
    for run_id, (env, records) in runs.items():
        writer = store.open_run(env, "quick", run_id)
        for record in records:
            writer.append({**{k: v for k, v in record.items() if k != "run_id"}, "env": env})
        writer.close()


def _plant_spec(store, spec):
    store.dir.mkdir(parents=True, exist_ok=True)
    store.spec_file.write_text(json.dumps(spec.to_dict()))


def _make_stale(folder):
    """Make a saved fit stale for today's code, as one saved before its index
    recorded the predictor kinds each op was chosen among."""
    index = json.loads((folder / "index.json").read_text())
    for entry in index["entries"]:
        del entry["candidate_kinds"]
    (folder / "index.json").write_text(json.dumps(index))
    return folder


def test_a_stale_fit_is_refused_with_one_line_naming_the_command(tmp_path):
    from perfmodel.fit.fitting import StaleFit, refit_command, require_current

    store = ResultStore(tmp_path, SPEC.key)
    folder = save_fit(fit_predictors(threaded_records(2, "r2"), SPEC), store, "f1", ["r2"])
    fit = load_fit(folder)
    assert require_current(fit) is fit and require_current(None) is None
    stale = load_fit(_make_stale(folder))
    assert stale.stale and not stale.predictors and stale.device_key == SPEC.key
    with pytest.raises(StaleFit) as caught:
        require_current(stale)
    line = str(caught.value)
    assert isinstance(caught.value, ValueError) and "\n" not in line
    assert line.startswith(f"stale fit {folder.as_posix()} (2 thread(s)): 1 of 1 predictors ")
    assert "(first: linear.forward: chosen among other predictor kinds (not recorded)" in line
    assert "the next `pytest" not in line  # the older hint is left out: one command
    assert line.endswith(f"run `perfmodel refit --device {SPEC.key} --threads 2`")
    assert caught.value.command == refit_command(SPEC.key, 2)
    assert refit_command("cuda-x", None) == "perfmodel refit --device cuda-x"


def test_refit_is_deterministic_and_fits_as_a_session_would(tmp_path):
    """Two refits of the same runs give identical predictors, the same as
    fit_predictors on the qualifying records; the runs of another thread count
    are left out; the new fit is the newest, so the stale one is passed over."""
    from perfmodel.fit.fitting import load_latest_fit, refit
    from perfmodel.measure.allocator import KEEP_FREED

    store = ResultStore(tmp_path, SPEC.key)
    _plant_spec(store, SPEC)
    env = {"threads": 2, "cpu_allocator": KEEP_FREED}
    records = planted_records()
    _store_runs(store, {"20260101T000000Z-1-aaaa": (env, records),
                        "20260101T000001Z-1-bbbb": ({**env, "threads": 1},
                                                    threaded_records(1, "x", 3.0))})
    _make_stale(save_fit(fit_predictors(records, SPEC), store, "20260101T000002Z-1-cccc",
                         ["20260101T000000Z-1-aaaa"]))
    assert load_latest_fit(store, threads=2)[0].stale
    first, folder, problems = refit(store, SPEC.key, 2, run_id="20260102T000000Z-1-dddd")
    second, _, _ = refit(store, SPEC.key, 2, run_id="20260102T000001Z-1-eeee")
    assert problems == [] and folder == store.fit_dir("20260102T000000Z-1-dddd")
    assert first.data_runs == second.data_runs == ("20260101T000000Z-1-aaaa",)
    direct = fit_predictors([{**r, "env": env} for r in records], SPEC, allocator=KEEP_FREED)
    latest, _ = load_latest_fit(store, threads=2)
    assert latest.stale == () and latest.path.name == "20260102T000001Z-1-eeee"
    assert set(first.predictors) == set(second.predictors) == set(direct.predictors) == \
        set(latest.predictors) == {("linear", "forward"), ("linear", "backward")}
    for key, predictor in first.predictors.items():
        configs = [dict(c.params) for c in get_op("linear").cases("quick")
                   if c.direction == key[1]]
        expected = predictor.predict("float32", configs)
        for other in (second, direct, latest):
            assert other.predictors[key].kind == predictor.kind
            np.testing.assert_array_equal(other.predictors[key].predict("float32", configs),
                                          expected)
        assert first.accuracy[key] == second.accuracy[key]


def test_refit_uses_the_newest_runs_allocator_policy_and_the_threads_own_spec(tmp_path):
    from perfmodel.fit.fitting import refit, runs_allocator, stored_spec
    from perfmodel.measure.allocator import DEFAULT, KEEP_FREED

    store = ResultStore(tmp_path, SPEC.key)
    _plant_spec(store, SPEC)
    (store.dir / "device-1threads.json").write_text(json.dumps(
        {**SPEC_1T.to_dict(), "mem_bandwidth_Bps": 1e10}))
    assert stored_spec(store, 2) == SPEC and stored_spec(store, None) == SPEC
    assert stored_spec(store, 1).mem_bandwidth_Bps == 1e10
    with pytest.raises(ValueError, match=r"no device spec for 4 thread\(s\) under"):
        stored_spec(store, 4)
    _store_runs(store, {"20260101T000000Z-1-aaaa": ({"threads": 1}, threaded_records(1, "a")),
                        "20260101T000001Z-1-bbbb": ({"threads": 1, "cpu_allocator": KEEP_FREED},
                                                    threaded_records(1, "b", 2.0))})
    records = store.load("measurement").records
    assert runs_allocator(records, SPEC_1T) == KEEP_FREED
    assert runs_allocator([r for r in records if r["run_id"].endswith("aaaa")], SPEC_1T) == DEFAULT
    assert runs_allocator(records, SPEC) is None  # no run at 2 threads
    fit, _, _ = refit(store, SPEC.key, 1, run_id="f1")
    assert fit.threads == 1 and fit.data_runs == ("20260101T000001Z-1-bbbb",)
    with pytest.raises(ValueError, match=r"no measurement runs at 2 thread\(s\) to refit from"):
        refit(store, SPEC.key, 2, run_id="f2")
    assert not store.fit_dir("f2").exists()


def test_the_gmae_summary_is_one_line():
    from perfmodel.fit.fitting import FitReport, gmae_summary

    fit = fit_predictors(threaded_records(2, "r2"), SPEC)
    line = gmae_summary(fit)
    assert line.startswith("per-op GMAE over 1 predictors (0 skipped): median ")
    assert "worst" in line and "(linear.forward)" in line and "\n" not in line
    assert gmae_summary(FitReport()) == "per-op GMAE: no predictors (0 skipped)"


def test_a_fit_from_before_the_convs_bias_param_loads_and_prices_both():
    """``BIAS`` is one of the convs' ``added_params``: the committed fits, saved
    before it existed, load with their conv predictors reading rows without
    its column (not stale), and price configs with and without a bias."""
    from perfmodel.fit.fitting import load_latest_fit
    from perfmodel.ops import get_op
    from perfmodel.store import paths
    from perfmodel.store.results import ResultStore
    from tests.helpers import REPO

    root = paths.default_root(REPO)
    # a fit of 2026-11-27, saved before BIAS existed (the GPU fits have been refitted since)
    fit, problems = load_latest_fit(ResultStore(root, "cpu-intel-xeon-f6m207-2c"), threads=2)
    if fit is None or ("conv2d", "forward") not in fit.predictors:
        pytest.skip(f"no committed f6m207 fit with a conv2d predictor ({problems})")
    predictor = fit.predictors[("conv2d", "forward")]
    assert not fit.stale and predictor.without == ("BIAS",)
    layer = dict(N=64, C=64, H=56, W=56, K=256, R=1, STRIDE=1, PAD=0, DIL=1, GROUPS=1,
                 GRAD_INPUT=1)
    with_bias, without = predictor.predict("float32", [dict(layer, BIAS=1), dict(layer, BIAS=0)])
    assert 0 < without <= with_bias < 1
    fitted = getattr(predictor.estimator, "n_features_in_", None)
    if fitted is not None:
        assert len(predictor.feature_matrix([("float32", layer)])[0]) == fitted
    assert get_op("conv2d").added_params == ("BIAS",)


def test_a_fit_runs_in_one_process_inside_an_mpi_rank(monkeypatch):
    from perfmodel.fit.fitting import fit_workers

    monkeypatch.delenv("PMI_RANK", raising=False)
    assert fit_workers(3) == 3 and fit_workers(0) == 1
    monkeypatch.setenv("PMI_RANK", "1")
    assert fit_workers() == 1
