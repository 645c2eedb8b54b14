"""The store under faults: writers killed mid-run, and arbitrary bytes on disk."""

import json
import random
import signal
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from perfmodel.store.results import SCHEMA_VERSION, ResultStore, read_run_file

KEY = "cpu-test-1c"
KILLS = 20

WRITER = """
import signal
import sys
from perfmodel.store.results import ResultStore
# a process started in the background of a shell without job control inherits an
# ignored SIGINT; this one must die of it as an interactive one would
signal.signal(signal.SIGINT, signal.default_int_handler)
writer = ResultStore(sys.argv[1], "cpu-test-1c").open_run({"device_key": "cpu-test-1c"})
n = 0
while True:
    writer.append({"kind": "measurement", "op": "addmm", "direction": "forward",
                   "dtype": "float32", "config": {"M": n, "N": 1, "K": 1}, "replicate": 0,
                   "measurement": {"median_s": 1e-3, "samples_s": [1e-3] * 200},
                   "env": {"device_key": "cpu-test-1c"}})
    n += 1
    print(n, flush=True)  # acknowledged only after the record was flushed and fsynced
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_killed_writers_lose_no_completed_record(tmp_path, sig):
    rng = random.Random(sig)
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    for kill in range(KILLS):
        root = tmp_path / f"kill{kill}"
        proc = subprocess.Popen([sys.executable, str(script), str(root)],
                                stdout=subprocess.PIPE, text=True)
        acked = 0
        while acked < 3:  # let it start writing, then kill at a random point
            acked = int(proc.stdout.readline())
        time.sleep(rng.uniform(0, 0.05))
        proc.send_signal(sig)
        acked = max([acked] + [int(line) for line in proc.stdout.read().split()])
        assert proc.wait(timeout=30) == -sig  # ended by the signal, not by an error
        loaded = ResultStore(root, KEY).load()
        configs = [r["config"]["M"] for r in loaded.records]
        assert configs == list(range(len(configs)))  # in order, none duplicated
        assert acked <= len(configs) <= acked + 1  # every acknowledged record survived
        assert all("truncated last line" in p for p in loaded.problems)


HEADER = json.dumps({"kind": "header", "schema": SCHEMA_VERSION, "run_id": "r",
                     "device_key": KEY, "env": {}}) + "\n"


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(body=st.one_of(st.binary(max_size=400),
                      st.text(max_size=400).map(lambda t: (HEADER + t).encode()),
                      st.lists(st.dictionaries(st.text(max_size=8), st.none() | st.integers()
                                               | st.text(max_size=8), max_size=4), max_size=4)
                      .map(lambda ds: (HEADER + "\n".join(map(json.dumps, ds))).encode())))
def test_loader_never_raises_on_arbitrary_bytes(tmp_path_factory, body):
    path = tmp_path_factory.mktemp("fuzz") / "run.jsonl"
    path.write_bytes(body)
    records, problems = read_run_file(path, KEY)
    for record in records:
        assert record["kind"] in ("measurement", "e2e")
    for problem in problems:
        assert problem.startswith(str(path))


def _good_run(store, run_id, n):
    writer = store.open_run({"device_key": KEY}, "smoke", run_id=run_id)
    for i in range(n):
        writer.append({"kind": "measurement", "op": "addmm", "direction": "forward",
                       "dtype": "float32", "config": {"M": i, "N": 1, "K": 1}, "replicate": 0,
                       "measurement": {"median_s": 1e-3}, "env": {}})
    writer.close()
    return writer.path


def test_every_kind_of_bad_file_at_once_is_named_and_every_good_file_loads(tmp_path):
    """One results folder holding each fault beside good runs: one message per bad
    file, each starting with its path, and not one good record lost."""
    store = ResultStore(tmp_path, KEY)
    good = [_good_run(store, f"good-{i}", 3 + i) for i in range(3)]
    record = json.dumps({"kind": "measurement", "op": "addmm", "direction": "forward",
                         "dtype": "float32", "config": {"M": 1, "N": 1, "K": 1},
                         "replicate": 0, "measurement": {"median_s": 1e-3}, "env": {}})
    header = json.loads(HEADER)
    bad = {
        "empty.jsonl": (b"", "empty file"),
        "blank.jsonl": (b"\n\n  \n", "empty file"),
        "binary.jsonl": (b"\x89PNG\r\n\x1a\n", "unreadable"),
        "notjson.jsonl": (b"<html>not a run</html>\n", "not JSON"),
        "latin1.jsonl": ("caf\xe9\n".encode("latin-1"), "unreadable"),
        "csv.jsonl": (b"op,median_s\naddmm,0.001\n", "not JSON"),
        "list-header.jsonl": (b"[1, 2]\n", "not a perfmodel run header"),
        "schema.jsonl": ((json.dumps({**header, "schema": 2}) + "\n").encode(),
                         "schema version 2, this perfmodel reads 1"),
        "no-schema.jsonl": ((json.dumps({k: v for k, v in header.items() if k != "schema"})
                             + "\n").encode(), "schema version None"),
        "foreign.jsonl": ((json.dumps({**header, "device_key": "cuda-h100"}) + "\n").encode(),
                          "records device 'cuda-h100'"),
        "truncated.jsonl": ((HEADER + record + "\n" + record[:20]).encode(),
                            "truncated last line"),
        "bad-record.jsonl": ((HEADER + '{"kind": "measurement"}\n' + record + "\n").encode(),
                             "bad record skipped"),
    }
    for name, (content, _) in bad.items():
        (store.runs_dir / name).write_bytes(content)
    (store.runs_dir / "adir.jsonl").mkdir()  # not even a file
    loaded = store.load()
    counts = {}
    for r in loaded.records:
        counts[r["run_id"]] = counts.get(r["run_id"], 0) + 1
    assert counts == {"good-0": 3, "good-1": 4, "good-2": 5, "r": 2}  # r: the two partial files
    assert len(loaded.problems) == len(bad) + 1
    for name, (_, expected) in bad.items():
        path = str(store.runs_dir / name)
        mine = [p for p in loaded.problems if p.startswith(path + ":")]
        assert len(mine) == 1 and expected in mine[0], (name, loaded.problems)
    assert any(p.startswith(f"{store.runs_dir / 'adir.jsonl'}: unreadable")
               for p in loaded.problems)
    assert all(p.startswith(str(store.runs_dir)) for p in loaded.problems)
    assert not [p for p in loaded.problems if str(good[0]) in p]
