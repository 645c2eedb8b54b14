"""Report microbench items to pytest-benchmark, from perfmodel's own samples.

perfmodel times each case with :class:`perfmodel.measure.timer.Timer` (warm-up,
blocks for short calls, adaptive stopping, CUDA events); this module hands
those samples to pytest-benchmark instead of timing the op a second time, so
microbench items appear in its table, in ``--benchmark-json`` and
``--benchmark-save`` files, and in ``pytest-benchmark compare``.

What a pytest-benchmark *round* is here: one perfmodel sample, i.e. one timed
block of ``number`` back-to-back calls divided by ``number`` (seconds per
call; ``iterations`` in the JSON is that ``number``). The rounds of every
replicate of the case (default 2) are pooled, in order, so the statistics
pytest-benchmark prints (min, median, IQR, ...) are those of all the samples
perfmodel stored for the item.

pytest-benchmark is an output channel, not a driver: with ``-p no:benchmark``,
``--benchmark-disable`` or ``--benchmark-skip`` the items measure and store
as usual and nothing is reported to it.

Its table leaves out the microbench items unless ``--perfmodel-benchmark-table``
(or pytest-benchmark's ``--benchmark-enable``) asks for them
(:func:`pytest_sessionfinish`): a sweep's hundreds of rows would bury the
perfmodel summary. Its JSON, saved runs and ``--benchmark-compare`` are
unchanged.
"""

from __future__ import annotations

import pytest


def feed_benchmark(request: pytest.FixtureRequest, measurements) -> bool:
    """Give pytest-benchmark the samples of ``measurements`` (the replicates of
    one case, :class:`perfmodel.measure.timer.Measurement`) as this item's benchmark.

    Returns False, doing nothing, when pytest-benchmark is absent, disabled or
    skipping, or when no measurement kept its samples.
    """
    session = getattr(request.config, "_benchmarksession", None)
    from perfmodel.measure.timer import Measurement

    # the samples as the run file stores them (Measurement.to_stored), so that the
    # JSON and the stored records agree
    samples = [s for m in measurements for s in Measurement.from_dict(m.to_stored()).samples_s]
    if session is None or session.disabled or session.skip or not samples:
        return False
    fixture = request.getfixturevalue("benchmark")
    first = measurements[0]
    # pytest-benchmark has no public way to add samples it did not time:
    # `_make_stats` registers the item's Metadata with its session, and `_mode`
    # marks the fixture used (so it neither warns nor times again).
    fixture._mode = "perfmodel"
    metadata = fixture._make_stats(first.number)
    metadata.options = {"timer": f"perfmodel.measure.timer.Timer({first.timer})",
                        "min_rounds": len(samples), "warmup": first.warmup_n,
                        "disable_gc": False, "min_time": 0.0, "max_time": None,
                        "precision": None, "confidence": None}
    fixture.extra_info["perfmodel"] = {
        "replicates": len(measurements),
        "medians_s": [m.median_s for m in measurements],
        "numbers": [m.number for m in measurements],
        "stop_reasons": [m.stop_reason for m in measurements],
        "cache": first.cache, "threads": first.threads}
    for sample in samples:
        metadata.stats.update(sample)  # already seconds per call: not divided again
    return True


def table_wanted(config: pytest.Config) -> bool:
    """Whether pytest-benchmark's table shows the microbench items."""
    return bool(config.getoption("perfmodel_benchmark_table", False)
                or config.getoption("benchmark_enable", False))


def hide_perfmodel_rows(bench_session) -> None:
    """Take the rows fed by :func:`feed_benchmark` out of the table that
    pytest-benchmark's session ``bench_session`` is about to print (its JSON
    and saved runs are written by then). When no other row is left, its table
    is turned off instead (``quiet``), so that ``--benchmark-compare-fail``
    still fails the run on a regression."""
    groups = getattr(bench_session, "groups", None)
    if not groups:
        return
    kept = [(name, [b for b in rows if "perfmodel" not in (b.get("extra_info") or {})])
            for name, rows in groups]
    kept = [(name, rows) for name, rows in kept if rows]
    if kept:
        bench_session.groups = kept
    else:
        bench_session.quiet = True


def pytest_sessionfinish(session: pytest.Session) -> None:
    """After pytest-benchmark has saved its data (its hook wraps this one) and
    before it prints its table: hide the microbench rows unless wanted."""
    bench_session = getattr(session.config, "_benchmarksession", None)
    if bench_session is not None and not table_wanted(session.config):
        hide_perfmodel_rows(bench_session)
