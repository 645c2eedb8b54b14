"""The fits committed under the repository's ``results/`` stay usable by today's code.

For every device key and every thread count a committed fit was trained at, the
newest fit (the one :func:`perfmodel.fit.fitting.load_latest_fit` picks, so the
one ``predict_model``, ``perfmodel predict`` and ``perfmodel replay`` use) must
load with no stale predictor: a predictor whose op's params, or the predictor
kinds it is chosen among, changed since the fit would be refused
(:class:`~perfmodel.fit.fitting.StaleFit`). A failure names the device, the
thread count and the command that refits from the committed runs. Loading
only: a few seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfmodel.store import paths

RESULTS = Path(__file__).resolve().parent.parent / "results"


def _thread_counts(folder: Path) -> list[int | None]:
    """The thread counts the fits of one device folder were trained at (None:
    fits saved without one, and every CUDA fit), read from their indexes."""
    counts: set[int | None] = set()
    for fit in paths.fit_dirs(folder):
        try:
            threads = json.loads(paths.fit_index(fit).read_text(encoding="utf-8")).get("threads")
        except (OSError, ValueError, AttributeError):
            threads = None  # unreadable: load_latest_fit names it below
        counts.add(threads if isinstance(threads, int) else None)
    return sorted(counts, key=lambda t: -1 if t is None else t)


COMMITTED = [(key, threads) for key in paths.device_keys(RESULTS)
             for threads in _thread_counts(paths.device_dir(RESULTS, key))]


def test_some_fits_are_committed():
    assert COMMITTED, f"no fits under {RESULTS}"


@pytest.mark.parametrize(("key", "threads"), COMMITTED,
                         ids=[f"{k}-{t or 'any'}threads" for k, t in COMMITTED])
def test_the_newest_committed_fit_is_not_stale(key, threads):
    from perfmodel.fit.fitting import load_latest_fit, refit_command
    from perfmodel.store.results import ResultStore

    fit, problems = load_latest_fit(ResultStore(RESULTS, key), threads=threads)
    command = refit_command(key, threads)
    count = "any thread count" if threads is None else f"{threads} thread(s)"
    assert fit is not None, (f"{key}, {count}: no committed fit loads ({'; '.join(problems)}); "
                             f"run `{command}`")
    assert not problems, (f"{key}, {count}: a newer committed fit does not load "
                          f"({problems[0]}); run `{command}`")
    if fit.stale:
        first = fit.skipped[fit.stale[0]].partition("; ")[0]
        pytest.fail(f"{key}, {count}: the newest committed fit {fit.path.name} has "
                    f"{len(fit.stale)} stale predictor(s) of {len(fit.stale) + len(fit.predictors)} "
                    f"(first: {first}); run `{command}` and commit the new fit",
                    pytrace=False)
