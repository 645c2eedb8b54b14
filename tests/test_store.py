"""Results store: incremental writes, merging, and bad files reported by path."""

import json
import os

import pytest

from perfmodel.store.results import SCHEMA_VERSION, ResultStore, read_run_file

ENV = {"device_key": "cpu-test-1c", "threads": 1}


def record(op="addmm", seconds=1e-3, replicate=0):
    return {"kind": "measurement", "op": op, "direction": "forward", "dtype": "float32",
            "config": {"M": 8, "N": 8, "K": 8}, "replicate": replicate,
            "measurement": {"median_s": seconds}, "env": ENV}


@pytest.fixture
def store(tmp_path):
    return ResultStore(tmp_path, "cpu-test-1c")


def test_runs_merge(store):
    for n in range(3):
        writer = store.open_run(ENV, "smoke")
        writer.append(record(seconds=n + 1.0))
        writer.close()
    loaded = store.load("measurement")
    assert loaded.problems == []
    assert sorted(r["measurement"]["median_s"] for r in loaded.records) == [1.0, 2.0, 3.0]
    assert len({r["run_id"] for r in loaded.records}) == 3


def test_each_record_reaches_disk_before_close(store):
    writer = store.open_run(ENV)
    writer.append(record())
    records, problems = read_run_file(writer.path, store.device_key)  # run still open
    assert len(records) == 1 and problems == []
    writer.close()


def test_run_file_is_never_overwritten(store):
    store.open_run(ENV, run_id="same").close()
    with pytest.raises(FileExistsError):
        store.open_run(ENV, run_id="same")


def test_invalid_record_is_refused_at_write(store):
    writer = store.open_run(ENV)
    bad = record()
    del bad["config"]
    with pytest.raises(ValueError, match="config"):
        writer.append(bad)


def _write(store, name, text):
    store.runs_dir.mkdir(parents=True, exist_ok=True)
    path = store.runs_dir / name
    path.write_text(text)
    return path


def _header(**overrides):
    header = {"kind": "header", "schema": SCHEMA_VERSION, "run_id": "r",
              "device_key": "cpu-test-1c", "env": ENV}
    header.update(overrides)
    return json.dumps(header)


@pytest.mark.parametrize("name, text, expected", [
    ("empty.jsonl", "", "empty file"),
    ("garbage.jsonl", "\x00not json\n", "not JSON"),
    ("schema.jsonl", _header(schema=99) + "\n", "schema version 99"),
    ("foreign.jsonl", _header(device_key="cuda-h100") + "\n", "cuda-h100"),
    ("noheader.jsonl", json.dumps(record()) + "\n", "not a perfmodel run header"),
])
def test_bad_files_are_reported_by_path_and_the_rest_loads(store, name, text, expected):
    writer = store.open_run(ENV)
    writer.append(record())
    writer.close()
    path = _write(store, name, text)
    loaded = store.load()
    assert len(loaded.of_kind("measurement")) == 1
    assert len(loaded.problems) == 1
    assert str(path) in loaded.problems[0] and expected in loaded.problems[0]


def test_truncated_last_line_keeps_complete_records(store):
    good = json.dumps(record())
    path = _write(store, "cut.jsonl", _header() + "\n" + good + "\n" + good[: len(good) // 2])
    loaded = store.load()
    assert len(loaded.records) == 1
    assert loaded.problems == [f"{path}:3: truncated last line skipped (run interrupted?)"]


def test_bad_line_in_the_middle_is_skipped(store):
    good = json.dumps(record())
    path = _write(store, "mid.jsonl", "\n".join([_header(), good, "{oops", good]) + "\n")
    loaded = store.load()
    assert len(loaded.records) == 2
    assert loaded.problems[0].startswith(f"{path}:3: bad record skipped")


@pytest.mark.parametrize("beside", [-1, 1.5, True, "1"])
def test_a_bad_timed_beside_skips_its_record_naming_the_line(store, beside):
    good = {**record(), "timed_beside": 1}
    path = _write(store, "beside.jsonl", "\n".join(
        [_header(), json.dumps(good), json.dumps({**record(), "timed_beside": beside})]) + "\n")
    loaded = store.load()
    assert [r["timed_beside"] for r in loaded.records] == [1]
    assert loaded.problems[0].startswith(f"{path}:3: bad record skipped")
    assert "timed_beside" in loaded.problems[0]


def test_a_bad_host_speed_skips_its_record_naming_the_line(store):
    good = {**record(), "host_speed": {"addmm": 3e-3, "copy": 1.5e-3}}
    bad = {**record(), "host_speed": {"addmm": -1.0, "copy": 1.5e-3}}
    path = _write(store, "speed.jsonl",
                  "\n".join([_header(), json.dumps(good), json.dumps(bad)]) + "\n")
    loaded = store.load()
    assert [r["host_speed"] for r in loaded.records] == [good["host_speed"]]
    assert loaded.problems[0].startswith(f"{path}:3: bad record skipped")
    assert "host_speed" in loaded.problems[0]


# -- compaction ------------------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from perfmodel.store import paths  # noqa: E402
from perfmodel.store.prune import compact_runs  # noqa: E402
from perfmodel.store.results import compact_run, read_run_header  # noqa: E402


def test_a_closed_run_is_compacted_with_the_same_records(store):
    writer = store.open_run(ENV, "smoke", run_id="r1")
    plain = writer.path
    for n in range(5):
        writer.append(record(seconds=n + 1.0))
    before, _ = read_run_file(plain, store.device_key)
    writer.close()
    assert not plain.exists() and writer.path == paths.compact_run_file(store.dir, "r1")
    after, problems = read_run_file(writer.path, store.device_key)
    assert problems == [] and after == before
    assert read_run_header(writer.path)["run_id"] == "r1"
    assert paths.run_files(store.dir) == [writer.path]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(min_value=1e-9, max_value=1e3), min_size=0, max_size=20))
def test_compaction_keeps_every_record(tmp_path_factory, seconds):
    store = ResultStore(tmp_path_factory.mktemp("compact"), "cpu-test-1c")
    writer = store.open_run(ENV)
    for s in seconds:
        writer.append(record(seconds=s))
    writer.close()
    loaded = store.load()
    assert loaded.problems == []
    assert [r["measurement"]["median_s"] for r in loaded.records] == seconds


def test_an_interrupted_compaction_loses_and_doubles_nothing(store):
    writer = store.open_run(ENV, run_id="r1")
    writer.append(record())
    writer.close(compact=False)
    plain = writer.path
    text = plain.read_bytes()
    compact_run(plain)
    plain.write_bytes(text)  # as if it stopped between the rename and the unlink
    loaded = store.load()
    assert loaded.problems == [] and len(loaded.records) == 1
    assert paths.run_files(store.dir) == [paths.compact_run_file(store.dir, "r1")]


def test_a_compacted_run_id_is_not_reused(store):
    store.open_run(ENV, run_id="same").close()
    assert paths.compact_run_file(store.dir, "same").exists()
    with pytest.raises(FileExistsError):
        store.open_run(ENV, run_id="same")


def test_a_corrupt_compacted_run_is_reported_by_path(store):
    good = store.open_run(ENV, run_id="good")
    good.append(record())
    good.close()
    bad = paths.compact_run_file(store.dir, "bad")
    bad.write_bytes(good.path.read_bytes()[:30])  # cut short
    loaded = store.load()
    assert len(loaded.records) == 1
    assert len(loaded.problems) == 1 and loaded.problems[0].startswith(f"{bad}: unreadable")
    with pytest.raises(ValueError, match="bad.jsonl.gz: not a readable run file"):
        read_run_header(bad)


def test_prune_compacts_old_plain_runs_only(store):
    for run_id in ("old", "young"):
        writer = store.open_run(ENV, run_id=run_id)
        writer.append(record())
        writer.close(compact=False)
    old = paths.run_file(store.dir, "old")
    young = paths.run_file(store.dir, "young")
    now = young.stat().st_mtime
    os.utime(old, (now - 7200, now - 7200))
    listed = compact_runs(store.root, [store.device_key], dry_run=True, now_s=now)
    assert [(p, after) for p, _, after in listed] == [(old, 0)] and old.exists()
    done = compact_runs(store.root, [store.device_key], now_s=now)
    assert [p for p, _, _ in done] == [paths.compact_run_file(store.dir, "old")]
    assert young.exists() and not old.exists()
    assert len(store.load().records) == 2
