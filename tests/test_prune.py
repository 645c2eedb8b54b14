"""`perfmodel prune`: keeps the newest runs per profile, the runs and fit a baseline
names, the fit the code picks and its training runs; removes the rest."""

from __future__ import annotations

import json

import pytest

from perfmodel.cli.main import main
from perfmodel.fit.fitting import FitReport, load_latest_fit, save_fit
from perfmodel.gate.baseline import save_baseline
from perfmodel.store import paths
from perfmodel.store.prune import apply_prune, plan_prune, prune
from perfmodel.store.results import ResultStore, data_id

KEY = "cpu-prune-2c"
ENV = {"threads": 2}


def run_id(n: int, suffix: str = "") -> str:
    return f"20261101T{n:06d}Z-1-aaaa{suffix}"


def measurement(median_s=1e-3):
    return {"kind": "measurement", "op": "relu", "direction": "forward", "dtype": "float32",
            "config": {"n": 64}, "replicate": 0, "measurement": {"median_s": median_s},
            "env": ENV}


def e2e(workload, measured_s, predicted_s, **extra):
    return {"kind": "e2e", "workload": workload, "measured_s": measured_s,
            "predicted_s": predicted_s, "error": abs(predicted_s - measured_s) / measured_s,
            "signed_error": (predicted_s - measured_s) / measured_s, "env": ENV, **extra}


def write_run(store, n, profile="quick", records=(), suffix=""):
    writer = store.open_run(ENV, profile, run_id(n, suffix))
    for record in records or [measurement()]:
        writer.append(record)
    writer.close()
    return run_id(n, suffix)


def save_empty_fit(store, n, threads, data_runs):
    """A fit folder as save_fit writes it (no predictors: prune reads the index)."""
    report = FitReport(data_runs=tuple(data_runs), threads=threads)
    return save_fit(report, store, run_id(n, "-fit"), data_runs)


@pytest.fixture
def tree(tmp_path):
    """Runs 1-14 of profile quick (2, 3: a baseline's E2E runs), 15-16 of smoke;
    fits: 2 threads trained on runs 1, 4 (old) and on 5, 6 (newest), 1 thread on 7
    (named by the baseline) and on 8 (newest)."""
    store = ResultStore(tmp_path / "results", KEY)
    for n in range(1, 15):
        records = [measurement()]
        if n in (2, 3):
            records = [e2e("mlp_small", 0.1, 0.1 + 0.001 * n), e2e("cnn", 0.2, 0.19 - 0.001 * n)]
        if n == 9:
            records = [e2e("mlp_small", 0.1, 0.1 + 0.009, bias=0.2)]  # planted bias: not it
        write_run(store, n, records=records)
    write_run(store, 15, profile="smoke")
    write_run(store, 16, profile="smoke")
    save_empty_fit(store, 20, 2, [run_id(1), run_id(4)])
    save_empty_fit(store, 21, 1, [run_id(7)])
    save_empty_fit(store, 22, 2, [run_id(5), run_id(6)])
    save_empty_fit(store, 23, 1, [run_id(8)])
    save_baseline(store.baseline_path("quick"), KEY,
                  {"mlp_small": [0.02, 0.03], "cnn": [-0.06, -0.065]}, ENV,
                  fit_data=data_id([run_id(7)]))
    return store


def snapshot(root):
    return sorted((p.relative_to(root).as_posix(), p.stat().st_size)
                  for p in root.rglob("*") if p.is_file())


def names(entries):
    return {e.path.name for e in entries}


def test_plan_keeps_what_is_used(tree):
    plan = plan_prune(tree.root, KEY, keep=3)
    kept_runs = {e.path.name for e in plan.keep if e.kind == "run"}
    assert kept_runs == {f"{run_id(n)}.jsonl.gz" for n in (12, 13, 14,  # newest 3 of quick
                                                         15, 16,  # smoke has only two
                                                         2, 3,  # the baseline's runs
                                                         5, 6, 7, 8)}  # kept fits' data
    assert {e.path.name for e in plan.remove if e.kind == "run"} == \
        {f"{run_id(n)}.jsonl.gz" for n in (1, 4, 9, 10, 11)}
    assert {e.path.name for e in plan.keep if e.kind == "fit"} == \
        {run_id(n, "-fit") for n in (21, 22, 23)}
    assert {e.path.name for e in plan.remove if e.kind == "fit"} == {run_id(20, "-fit")}
    why = {e.path.name: e.why for e in plan.keep}
    assert "runs of baseline-quick.json" in why[f"{run_id(2)}.jsonl.gz"]
    assert why[run_id(21, "-fit")] == "named by baseline-quick.json"
    assert why[run_id(23, "-fit")] == "newest fit of 1 thread(s)"
    assert why[f"{run_id(7)}.jsonl.gz"] == f"trained fit {run_id(21, '-fit')}"
    assert plan.bytes_freed == sum(e.bytes for e in plan.remove) > 0
    assert not plan.problems


def test_dry_run_changes_nothing(tree):
    before = snapshot(tree.root)
    plans = prune(tree.root, keep=3, dry_run=True)
    assert snapshot(tree.root) == before
    assert [p.device_key for p in plans] == [KEY] and plans[0].remove


def test_prune_removes_and_the_code_picks_the_same_fits(tree):
    picked = {t: load_latest_fit(tree, threads=t)[0].data_runs for t in (1, 2)}
    plan = plan_prune(tree.root, KEY, keep=3)
    size = sum(s for _, s in snapshot(tree.root))
    freed = apply_prune(plan)
    assert freed == plan.bytes_freed and sum(s for _, s in snapshot(tree.root)) == size - freed
    for entry in plan.remove:
        assert not entry.path.exists()
    for entry in plan.keep:
        assert entry.path.exists()
    assert {t: load_latest_fit(tree, threads=t)[0].data_runs for t in (1, 2)} == picked
    assert paths.baseline_file(tree.dir, "quick").is_file()
    again = plan_prune(tree.root, KEY, keep=3)  # nothing left to remove
    assert not again.remove and names(again.keep) == names(plan.keep)


def test_keep_zero_keeps_only_what_is_named(tree):
    plan = plan_prune(tree.root, KEY, keep=0)
    assert {e.path.name for e in plan.keep if e.kind == "run"} == \
        {f"{run_id(n)}.jsonl.gz" for n in (2, 3, 5, 6, 7, 8)}


def test_zoo_runs_are_kept_apart_from_the_main_jobs(tmp_path):
    """Main jobs do not push the zoo's runs out of the newest ``keep``: the zoo's
    noise floor needs its runs hours apart."""
    store = ResultStore(tmp_path / "results", KEY)
    zoo = {**e2e("zoo_vgg", 0.01, 0.011), "kind": "zoo", "half": "tuning"}
    for n in (1, 2, 3):
        write_run(store, n, records=[zoo])
    for n in range(4, 10):
        write_run(store, n)
    plan = plan_prune(tmp_path / "results", KEY, keep=2)
    kept = {e.path.name: e.why for e in plan.keep if e.kind == "run"}
    assert set(kept) == {f"{run_id(n)}.jsonl.gz" for n in (2, 3, 8, 9)}
    assert kept[f"{run_id(3)}.jsonl.gz"] == "newest 2 zoo runs of profile quick"
    assert kept[f"{run_id(9)}.jsonl.gz"] == "newest 2 of profile quick"


def test_unreadable_things_are_left_alone(tree):
    bad_run = paths.run_file(tree.dir, run_id(0))
    bad_run.write_text("not json\n")
    broken_fit = paths.fit_dir(tree.dir, run_id(99, "-fit"))  # newest, but unloadable
    broken_fit.mkdir()
    paths.fit_index(broken_fit).write_text("{")
    plan = plan_prune(tree.root, KEY, keep=3)
    assert bad_run not in {e.path for e in plan.keep + plan.remove}
    assert broken_fit not in {e.path for e in plan.keep + plan.remove}
    assert any(str(bad_run) in p and "left alone" in p for p in plan.problems)
    assert any(str(broken_fit) in p for p in plan.problems)
    # the code skips the broken fit too: the newest loadable 2-thread fit is still kept
    assert run_id(22, "-fit") in names(plan.keep)
    apply_prune(plan)
    assert bad_run.exists() and broken_fit.exists()


def test_unreadable_baseline_keeps_every_run_of_its_profile(tree):
    tree.baseline_path("quick").write_text("{ nope")
    plan = plan_prune(tree.root, KEY, keep=3)
    assert not [e for e in plan.remove if e.kind == "run"]
    assert any("unreadable baseline" in p for p in plan.problems)


def test_baseline_runs_not_found_are_reported(tree):
    baseline = json.loads(tree.baseline_path("quick").read_text())
    baseline["workloads"]["mlp_small"]["errors"].append(0.5)
    baseline["workloads"]["mlp_small"]["n"] = 3
    tree.baseline_path("quick").write_text(json.dumps(baseline))
    plan = plan_prune(tree.root, KEY, keep=3)
    assert plan.problems == ["baseline-quick.json: 1 of its runs' records were not found in "
                             "any run file (their runs are not stored here; the baseline keeps "
                             "what the gate reads)"]


def test_rank_files_and_a_fit_trained_on_them(tmp_path):
    store = ResultStore(tmp_path, KEY)
    ranks = [write_run(store, 1, suffix=f"-rank{r}") for r in (0, 1)]
    for n in range(2, 6):
        write_run(store, n)
    save_empty_fit(store, 9, 1, ranks)
    plan = plan_prune(tmp_path, KEY, keep=1)
    assert names(e for e in plan.keep if e.kind == "run") == \
        {f"{r}.jsonl.gz" for r in ranks} | {f"{run_id(5)}.jsonl.gz"}


# -- command line ------------------------------------------------------------------------

def test_cli_dry_run_prints_every_entry_and_the_bytes(tree, capsys):
    before = snapshot(tree.root)
    assert main(["prune", "--results", str(tree.root), "--keep", "3", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert snapshot(tree.root) == before
    plan = plan_prune(tree.root, KEY, keep=3)
    assert sum(line.startswith("  would remove ") for line in out) == len(plan.remove)
    assert sum(line.startswith("  keep ") for line in out) == len(plan.keep)
    assert f"would free" in out[-2] and f"({plan.bytes_freed} bytes)" in out[-2]
    assert out[-1].startswith("total: would free") and f"({plan.bytes_freed} bytes)" in out[-1]


def test_cli_prunes_one_device(tree, capsys):
    other = ResultStore(tree.root, "cpu-other-2c")
    for n in range(1, 4):
        write_run(other, n)
    untouched = snapshot(other.dir)
    assert main(["prune", "--results", str(tree.root), "--device", KEY, "--keep", "3"]) == 0
    out = capsys.readouterr().out
    assert "removed 5 run file(s) and 1 fit(s), freed" in out
    assert snapshot(other.dir) == untouched
    assert not paths.fit_dir(tree.dir, run_id(20, "-fit")).exists()


@pytest.mark.parametrize("argv, message", [
    (["--keep", "-1"], "--keep must be >= 0, got -1"),
    (["--device", "cpu-nothing-1c"], "no results folder at"),
])
def test_cli_bad_arguments_are_one_line(tree, capsys, argv, message):
    assert main(["prune", "--results", str(tree.root), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("perfmodel prune: error: ") and message in err[0]


def test_cli_without_results(tmp_path, capsys):
    assert main(["prune", "--results", str(tmp_path / "none")]) == 2
    assert "no stored results under" in capsys.readouterr().err


def test_cli_compresses_the_kept_fits(tree, capsys):
    """--compress-fits rewrites kept fits saved uncompressed; they load the same."""
    from perfmodel.fit.fitting import fit_predictors, load_fit
    from tests.helpers import SPEC, planted_records, save_uncompressed

    fit = fit_predictors(planted_records(), SPEC)
    fit.data_runs, fit.threads = (run_id(14),), 2
    folder = save_fit(fit, tree, run_id(30, "-fit"), [run_id(14)])
    save_uncompressed(folder)
    size = sum(p.stat().st_size for p in folder.glob("*.npz"))
    assert main(["prune", "--results", str(tree.root), "--keep", "3", "--dry-run",
                 "--compress-fits"]) == 0
    assert sum(p.stat().st_size for p in folder.glob("*.npz")) == size  # dry run
    assert main(["prune", "--results", str(tree.root), "--keep", "3", "--compress-fits"]) == 0
    out = capsys.readouterr().out
    assert f"{KEY}: compressed {folder.name}: arrays" in out
    assert sum(p.stat().st_size for p in folder.glob("*.npz")) < size
    assert set(load_fit(folder).predictors) == set(fit.predictors)


def test_drop_fit_runs_removes_their_training_runs(tree):
    plan = plan_prune(tree.root, KEY, keep=3, keep_fit_runs=False)
    assert {e.path.name for e in plan.keep if e.kind == "run"} == \
        {f"{run_id(n)}.jsonl.gz" for n in (12, 13, 14, 15, 16, 2, 3)}
    assert {e.path.name for e in plan.keep if e.kind == "fit"} == \
        {run_id(n, "-fit") for n in (21, 22, 23)}


def test_an_old_fit_without_a_thread_count_goes_once_newer_fits_exist(tmp_path):
    """A lookup without a thread count takes the newest fit of all, and one with a
    thread count never takes a fit saved without one: an older thread-less fit is
    used by nothing and goes."""
    store = ResultStore(tmp_path / "results", KEY)
    write_run(store, 1)
    legacy = save_empty_fit(store, 2, None, [run_id(1)])
    current = save_empty_fit(store, 3, 2, [run_id(1)])
    plan = plan_prune(tmp_path / "results", KEY)
    assert {e.path for e in plan.remove if e.kind == "fit"} == {legacy}
    (kept,) = [e for e in plan.keep if e.kind == "fit"]
    assert kept.path == current and kept.why == "newest fit of 2 thread(s)"
