"""Fit per-op predictors from stored measurements and score them on held-out configs.

For every (op, direction) the candidates are scored by k-fold cross-validation
over the *configs* (both replicates of a config fall in the same fold: held out
means unseen, and every config is held out once) and on an extrapolation split
(train on the smaller problems, test on the largest). The one with the lowest
random-split GMAE is kept (ties within :data:`SELECTION_TIE` go to the lowest
extrapolation GMAE; :func:`choose_kind`) and refitted on every config. The report
also gives the noise floor: the GMAE between two independent measurements of
the same configs.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from perfmodel.measure.allocator import record_allocator
from perfmodel.device.spec import DeviceSpec
from perfmodel.measure.drift import HostSpeed
from perfmodel.fit.metrics import gmae, mape, max_abs_rel_error, noise_floor
from perfmodel.ops import OpDef, get_op
from perfmodel.ops.base import DTYPE_BYTES, base_direction, warm_direction
from perfmodel.ops.collective import HOST_CPU, LOADED
from perfmodel.fit.comm_model import CommRegressor, comm_features
from perfmodel.fit.predictors import (EfficiencyRegressor, EmbeddingLookupRegressor,
                                  RooflineRegressor, ShapeRegressor, compress_predictor_files,
                                  load_predictor, save_predictor)
from perfmodel.plaindata import is_seconds, write_json_atomic
from perfmodel.store import paths
from perfmodel.store.results import ResultStore, data_id

#: Dtypes with their own compute-rate column in the roofline features.
COMPUTE_DTYPES = ("float32", "bfloat16", "float16")
#: Folds of the random split: each config is held out once, so the held-out
#: error covers every config (a single 25% split holds out too few of a
#: family's configs for its error to be stable between runs of the same code).
N_FOLDS = 4
#: Fraction of configs (the largest by FLOPs) held out by the extrapolation split.
EXTRAPOLATION_FRACTION = 0.2
#: Fewest distinct configs needed to fit and score an op.
MIN_CONFIGS = 4
#: Fewest distinct configs for the learned (tree) predictors to be candidates;
#: below it only the two-parameter-per-resource roofline is fitted.
MIN_CONFIGS_FOR_ML = 16
#: Fewest distinct configs for every communication curve to be a candidate;
#: below it only the first (the sigmoid). The curves have 2 to 4 parameters per
#: world size: the smoke profile's 4 sizes per world size are too few for the
#: held-out choice among them, one world size of the quick profile (16 sizes,
#: as the loaded times are measured) is enough.
MIN_CONFIGS_FOR_CURVES = 10
#: The collectives' kinds: one per :data:`perfmodel.fit.comm_model.CURVES`.
COMM_KINDS = ("comm_sigmoid", "comm_hockney", "comm_cache", "comm_interp")
PREDICTOR_KINDS = ("roofline", "shape", "efficiency", "embedding_analytic", *COMM_KINDS)


@dataclass(frozen=True)
class Sample:
    """One measurement of one config: the unit the predictors learn from."""

    dtype: str
    params: tuple[tuple[str, int], ...]
    seconds: float
    run_id: str
    replicate: int
    #: the host's speed when it was measured (its record's ``host_speed``), or None
    host_speed: HostSpeed | None = field(default=None, compare=False)
    #: other processes timing on the host meanwhile (its record's ``timed_beside``;
    #: None when the record does not say)
    timed_beside: int | None = field(default=None, compare=False)

    @property
    def config_key(self) -> tuple:
        return (self.dtype, self.params)


def features(kind: str, op: OpDef, direction: str, dtype: str,
             params: Mapping[str, int], without: tuple[str, ...] = ()) -> list[float]:
    """Feature row of one config for predictor ``kind``.

    ``roofline``: FLOPs in the column of ``dtype`` (FLOP), then bytes moved (B).
    ``shape``: the op's shape parameters (less those in ``without``: params
    added to the op after a fit, :attr:`OpDef.added_params`), its extra
    features, FLOPs, bytes and bytes per element.
    ``efficiency``: the roofline columns followed by the shape columns.
    A warm pseudo-direction (:data:`~perfmodel.ops.base.WARM_SUFFIX`) has its
    training direction's features.
    """
    params = op.complete_config(params)
    direction = base_direction(direction)
    flops = op.flops(params, direction)
    moved = op.bytes_moved(params, dtype, direction)
    if kind == "roofline":
        return [flops if dtype == d else 0.0 for d in COMPUTE_DTYPES] + [moved]
    if kind == "shape":
        return [float(params[p]) for p in op.params if p not in without] + \
            op.extra_features(params, dtype, direction) + \
            [flops, moved, float(DTYPE_BYTES[dtype])]
    if kind == "efficiency":
        return features("roofline", op, direction, dtype, params) + \
            features("shape", op, direction, dtype, params, without)
    if kind == "embedding_analytic":
        return [float(params[p]) for p in ("B", "E", "T", "L", "D")]
    if kind in COMM_KINDS:
        return comm_features(op, params)
    raise ValueError(f"unknown predictor kind {kind!r}: expected one of {PREDICTOR_KINDS}")


def roofline_peaks(device: DeviceSpec) -> list[float]:
    """Peak rate per roofline column: FLOP/s per compute dtype, then B/s."""
    fp32 = device.peak_flops["float32"]
    return [device.peak_flops.get(d, fp32) for d in COMPUTE_DTYPES] + [device.mem_bandwidth_Bps]


def candidate_kinds(op: OpDef, direction: str) -> tuple[str, ...]:
    """Predictor kinds that apply to ``op`` in ``direction``."""
    if op.family == "collective":  # latency/bandwidth curves per world size
        return COMM_KINDS
    generic = ("roofline", "shape", "efficiency")
    analytic = op.analytic_model(base_direction(direction))
    return generic + (("embedding_analytic",) if analytic else ())


def make_predictor(kind: str, device: DeviceSpec, op: OpDef | None = None,
                   direction: str = "forward"):
    """An unfitted predictor of ``kind`` for ``device`` (and ``op`` in ``direction``,
    which the analytical embedding model needs)."""
    if kind == "roofline":
        return RooflineRegressor(peaks=roofline_peaks(device))
    if kind == "shape":
        return ShapeRegressor()
    if kind == "efficiency":
        peaks = roofline_peaks(device)
        return EfficiencyRegressor(peaks=peaks, n_work=len(peaks))
    if kind in COMM_KINDS:
        return CommRegressor(curve=kind.removeprefix("comm_"))
    analytic = op.analytic_model(base_direction(direction)) if op is not None else None
    if kind == "embedding_analytic" and analytic:
        return EmbeddingLookupRegressor(kind=analytic, spec=device)
    raise ValueError(f"unknown predictor kind {kind!r}: expected one of {PREDICTOR_KINDS}")


@dataclass
class OpPredictor:
    """A fitted predictor of one (op, direction) and the features it reads."""

    op: str
    direction: str
    kind: str
    estimator: object
    #: params the op gained after this predictor was fitted (its feature rows
    #: leave them out: it prices every config as at their defaults)
    without: tuple[str, ...] = ()

    def feature_matrix(self, rows: Iterable[tuple[str, Mapping[str, int]]]) -> np.ndarray:
        """Feature rows of (dtype, params) pairs for this predictor's kind."""
        op = get_op(self.op)
        return np.array([features(self.kind, op, self.direction, dtype, params, self.without)
                         for dtype, params in rows], dtype=float)

    def predict(self, dtype: str, params_list: Sequence[Mapping[str, int]]) -> np.ndarray:
        """Predicted seconds for each config in ``params_list``, in one batched call."""
        return self.estimator.predict(self.feature_matrix((dtype, p) for p in params_list))


@dataclass
class OpAccuracy:
    """Held-out accuracy of one (op, direction). Errors are fractions (0.05 = 5%)."""

    op: str
    direction: str
    n_configs: int
    n_samples: int
    chosen: str
    reason: str
    gmae: float
    mape: float
    max_error: float
    gmae_extrapolation: float | None
    noise_floor: float | None
    n_noise_pairs: int
    candidates: dict[str, dict[str, float]] = field(default_factory=dict)
    #: GMAE between the first and the last run that measured each config: how
    #: far timings move between sessions (None with one run). The fit itself
    #: uses each config's newest run (:func:`newest_per_config`).
    noise_floor_runs: float | None = None
    #: the most FLOPs and bytes moved by one call among the configs it was
    #: fitted on (None in fits saved before they were recorded); see
    #: :meth:`beyond`
    largest_flops: float | None = None
    largest_bytes: float | None = None

    def beyond(self, params: Mapping[str, int], dtype: str) -> float | None:
        """How many times the largest fitted config's FLOPs (or bytes moved,
        whichever is further) one call of ``params`` needs: above 1 the
        predictor extrapolates. None when the fit did not record its range."""
        if self.largest_flops is None or self.largest_bytes is None:
            return None
        flops, moved = get_op(self.op).size(params, dtype, base_direction(self.direction))
        return max(flops / self.largest_flops if self.largest_flops > 0 else 0.0,
                   moved / self.largest_bytes if self.largest_bytes > 0 else 0.0)

    @property
    def name(self) -> str:
        return f"{self.op}.{self.direction}"


@dataclass
class FitReport:
    """Fitted predictors and their accuracy, keyed by ``(op, direction)``."""

    predictors: dict[tuple[str, str], OpPredictor] = field(default_factory=dict)
    accuracy: dict[tuple[str, str], OpAccuracy] = field(default_factory=dict)
    skipped: dict[tuple[str, str], str] = field(default_factory=dict)
    #: loaded predictors left out because their op's params, or the predictor
    #: kinds it is chosen among, changed since the fit
    stale: tuple[tuple[str, str], ...] = ()
    data_runs: tuple[str, ...] = ()  # run ids of the measurements it was trained on
    #: torch threads of the CPU measurements it was trained on (None: not a CPU
    #: fit, or a fit saved before thread counts were recorded).
    threads: int | None = None
    #: the host's speed over the measurements it was trained on (the median of
    #: their records' ``host_speed``; None when none recorded it)
    host_speed: HostSpeed | None = None
    #: the folder it was loaded from (None: fitted in this process, not loaded)
    path: Path | None = None
    #: the device key its index names (None: not loaded, or not recorded)
    device_key: str | None = None
    #: the last-level cache (bytes) of the CPU it predicts, which decides how
    #: much of a cold-cache op's data a step finds there
    #: (:func:`perfmodel.simulate.predict.llc_share`; None: not a CPU fit, or
    #: one saved before it was recorded: such an op is priced cold)
    llc_bytes: int | None = None

    @property
    def data_id(self) -> str:
        """A fingerprint of the measurements this fit was trained on (16 hex digits,
        "" without recorded runs): equal ids mean the same training data."""
        return data_id(self.data_runs)

    def predictor(self, op: str, direction: str) -> OpPredictor:
        try:
            return self.predictors[(op, direction)]
        except KeyError:
            why = self.skipped.get((op, direction), "no measurements")
            raise LookupError(f"no fitted predictor for {op}.{direction}: {why}") from None


def samples_from_records(records: Iterable[dict]) -> dict[tuple[str, str], list[Sample]]:
    """Group measurement records by (op, direction). A collective's record with
    ``rank_cpu_s`` (process CPU seconds per call of each rank) also gives a
    sample of ``(op, HOST_CPU)``: the mean over ranks; one with ``loaded_s``
    (its time under compute load) a sample of ``(op, LOADED)``. A cold-cache op's
    record with a ``warm`` timing also gives a sample of its warm direction
    (:func:`~perfmodel.ops.base.warm_direction`)."""
    from perfmodel.ops import OPS

    grouped: dict[tuple[str, str], list[Sample]] = {}
    for r in records:
        if r.get("kind") != "measurement":
            continue
        config = OPS[r["op"]].complete_config(r["config"]) if r["op"] in OPS else r["config"]
        params = tuple(sorted((k, int(v)) for k, v in config.items()))
        run_id, replicate = str(r.get("run_id")), int(r["replicate"])
        speed = r.get("host_speed")
        speed = None if speed is None else HostSpeed.from_dict(speed, f"run {run_id}")
        grouped.setdefault((r["op"], r["direction"]), []).append(
            Sample(r["dtype"], params, float(r["measurement"]["median_s"]), run_id, replicate,
                   speed, r.get("timed_beside")))
        warm = r.get("warm")
        if isinstance(warm, dict) and is_seconds(warm.get("median_s")):
            grouped.setdefault((r["op"], warm_direction(r["direction"])), []).append(
                Sample(r["dtype"], params, float(warm["median_s"]), run_id, replicate,
                       speed, r.get("timed_beside")))
        if not (r["op"] in OPS and OPS[r["op"]].family == "collective"):
            continue
        cpu, loaded = r.get("rank_cpu_s"), r.get("loaded_s")
        if isinstance(cpu, list) and cpu and all(is_seconds(v) for v in cpu):
            grouped.setdefault((r["op"], HOST_CPU), []).append(
                Sample(r["dtype"], params, float(np.mean(cpu)), run_id, replicate))
        if is_seconds(loaded):
            grouped.setdefault((r["op"], LOADED), []).append(
                Sample(r["dtype"], params, float(loaded), run_id, replicate))
    return grouped



def newest_per_config(samples: Iterable[Sample]) -> list[Sample]:
    """The samples of one run per config: its newest run timed alone, else its
    newest run whose records do not say, else its newest run timed beside other
    processes (run ids start with their UTC start time, so the largest id is the
    newest; "alone" is a record's ``timed_beside`` of 0).

    A device key names a CPU model, not a host: the same model behind another
    VM can run the same GEMMs markedly slower (see
    docs/journal/2026-11-23-sweep-design.md). Pooling sessions would fit
    their average; re-measuring a config replaces its older timings instead, so
    a fresh sweep prices the host that the end-to-end runs measure.

    Timings beside the other ranks of a sweep sharded over one host's cores are
    not the op's alone: one process times the cold-cache ops faster than
    1-thread sweeps sharded over 2 ranks of the same cores do (see
    docs/journal/2026-11-25-multi-rank-host-speed.md). So an alone timing is
    kept over a newer one taken beside others."""
    samples = list(samples)
    best: dict[tuple, tuple[int, str]] = {}
    for s in samples:
        rank = (_alone_rank(s.timed_beside), s.run_id)
        if rank > best.get(s.config_key, (-1, "")):
            best[s.config_key] = rank
    return [s for s in samples if s.run_id == best[s.config_key][1]]


def _alone_rank(timed_beside: int | None) -> int:
    """2 for a timing alone, 1 when unknown, 0 beside other processes."""
    return 1 if timed_beside is None else 2 if timed_beside == 0 else 0


def random_folds(keys: Sequence, n_folds: int = N_FOLDS, seed: int = 0) -> list[set]:
    """``n_folds`` disjoint sets of config keys covering ``keys``, seeded-random."""
    shuffled = sorted(keys)
    random.Random(seed).shuffle(shuffled)
    n_folds = max(2, min(n_folds, len(shuffled)))
    return [set(shuffled[i::n_folds]) for i in range(n_folds)]


def extrapolation_split(keys: Sequence, size_of) -> tuple[set, set]:
    """(train, test): the largest ``EXTRAPOLATION_FRACTION`` of configs by ``size_of`` held out."""
    ordered = sorted(keys, key=lambda k: (size_of(k), k))
    n_test = max(1, round(len(ordered) * EXTRAPOLATION_FRACTION))
    return set(ordered[:-n_test]), set(ordered[-n_test:])


def _fit(kind: str, op: OpDef, direction: str, device: DeviceSpec,
         train: list[Sample]) -> OpPredictor:
    predictor = OpPredictor(op.name, direction, kind, make_predictor(kind, device, op, direction))
    X = predictor.feature_matrix((s.dtype, dict(s.params)) for s in train)
    predictor.estimator.fit(X, np.array([s.seconds for s in train]))
    return predictor


def _score(predictor: OpPredictor, test: list[Sample]) -> tuple[np.ndarray, np.ndarray]:
    """(predicted, measured) seconds of ``test``."""
    X = predictor.feature_matrix((s.dtype, dict(s.params)) for s in test)
    pred = predictor.estimator.predict(X)
    return pred, np.array([s.seconds for s in test])


def measured_noise_floor(samples: list[Sample]) -> tuple[float | None, int]:
    """GMAE between the first two measurements of each config, and the pair count."""
    by_config: dict[tuple, list[Sample]] = {}
    for s in sorted(samples, key=lambda s: (s.run_id, s.replicate)):
        by_config.setdefault(s.config_key, []).append(s)
    pairs = [(v[0].seconds, v[1].seconds) for v in by_config.values() if len(v) >= 2]
    if not pairs:
        return None, 0
    a, b = np.array(pairs).T
    return noise_floor(a, b), len(pairs)


def between_runs_noise_floor(samples: list[Sample]) -> float | None:
    """GMAE between each config's first replicate in the first and in the last
    run that measured it; None when no config was measured in two runs."""
    by_config: dict[tuple, dict[str, float]] = {}
    for s in samples:
        if s.replicate == 0:
            by_config.setdefault(s.config_key, {})[s.run_id] = s.seconds
    pairs = [(runs[min(runs)], runs[max(runs)]) for runs in by_config.values() if len(runs) >= 2]
    if not pairs:
        return None
    a, b = np.array(pairs).T
    return noise_floor(a, b)


#: Random-split GMAE within this of the best counts as a tie (fraction).
SELECTION_TIE = 0.02


def choose_kind(candidates: Mapping[str, Mapping[str, float]]) -> tuple[str, str]:
    """The predictor kind to keep and why: the lowest random-split GMAE; among
    kinds within :data:`SELECTION_TIE` of it, the lowest extrapolation GMAE.

    The random split is where the E2E workloads' shapes mostly fall (their
    shapes are inside the sweep's ranges); extrapolation breaks ties. An
    earlier rule minimised the mean of the two, and on ``embedding_bag``
    backward, where every kind extrapolates poorly, it picked a regressor
    clearly worse on the random split, which then mispredicted a DLRM's
    embedding backward several-fold.
    """
    best = min(v["gmae"] for v in candidates.values())
    tied = [k for k, v in candidates.items() if v["gmae"] <= best + SELECTION_TIE]
    chosen = min(tied, key=lambda k: (candidates[k]["gmae_extrapolation"],
                                      candidates[k]["gmae"]))
    ranked = ", ".join(f"{k} {v['gmae']:.1%} (extrap {v['gmae_extrapolation']:.1%})"
                       for k, v in sorted(candidates.items(), key=lambda kv: kv[1]["gmae"]))
    return chosen, (f"lowest random-split GMAE, ties within {SELECTION_TIE:.0%} broken by "
                    f"extrapolation GMAE: {ranked}")


def fit_op(op_name: str, direction: str, samples: list[Sample], device: DeviceSpec,
           kinds: Sequence[str] | None = None) -> tuple[OpPredictor, OpAccuracy]:
    """Score every predictor kind on held-out configs, keep the best (see
    :func:`choose_kind`), refit it on all configs. Each config's newest run is
    what is fitted and scored (:func:`newest_per_config`); the older runs give
    the between-runs noise floor."""
    op = get_op(op_name)
    all_samples, samples = samples, newest_per_config(samples)
    keys = sorted({s.config_key for s in samples})
    if len(keys) < MIN_CONFIGS:
        raise ValueError(f"{op_name}.{direction}: {len(keys)} distinct configs measured, "
                         f"need at least {MIN_CONFIGS} to fit and hold some out")

    def subset(chosen_keys: set) -> list[Sample]:
        return [s for s in samples if s.config_key in chosen_keys]

    size = {k: op.flops(dict(k[1]), base_direction(direction)) for k in keys}
    ex_train_keys, ex_test_keys = extrapolation_split(keys, size.__getitem__)
    candidates: dict[str, dict[str, float]] = {}
    kinds = list(kinds or candidate_kinds(op, direction))
    if len(keys) < (MIN_CONFIGS_FOR_CURVES if op.family == "collective" else MIN_CONFIGS_FOR_ML):
        kinds = [k for k in kinds if k in ("roofline", "embedding_analytic")] or kinds[:1]
    for kind in kinds:
        pred, meas = _cross_validate(kind, op, direction, device, samples, keys)
        ex_pred, ex_meas = _score(_fit(kind, op, direction, device, subset(ex_train_keys)),
                                  subset(ex_test_keys))
        candidates[kind] = {"gmae": gmae(pred, meas), "mape": mape(pred, meas),
                            "max_error": max_abs_rel_error(pred, meas),
                            "gmae_extrapolation": gmae(ex_pred, ex_meas)}
    chosen, reason = choose_kind(candidates)
    final = _fit(chosen, op, direction, device, samples)
    floor, n_pairs = measured_noise_floor(samples)
    best = candidates[chosen]
    sizes = [op.size(dict(s.params), s.dtype, base_direction(direction)) for s in samples]
    accuracy = OpAccuracy(op_name, direction, len(keys), len(samples), chosen, reason,
                          best["gmae"], best["mape"], best["max_error"],
                          best["gmae_extrapolation"], floor, n_pairs, candidates,
                          between_runs_noise_floor(all_samples),
                          max(f for f, _ in sizes), max(b for _, b in sizes))
    return final, accuracy


def _cross_validate(kind: str, op: OpDef, direction: str, device: DeviceSpec,
                    samples: list[Sample], keys: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """(predicted, measured) seconds of every sample of ``keys``' configs, each
    predicted by a ``kind`` fitted on the other folds (:func:`random_folds`)."""
    scored = []
    for fold in random_folds(keys):
        train = [s for s in samples if s.config_key not in fold]
        scored.append(_score(_fit(kind, op, direction, device, train),
                             [s for s in samples if s.config_key in fold]))
    return (np.concatenate([p for p, _ in scored]), np.concatenate([m for _, m in scored]))


def held_out_gmae(op_name: str, direction: str, kind: str, samples: list[Sample],
                  device: DeviceSpec, scale: float = 1.0) -> tuple[float, int]:
    """(GMAE, configs) of predictor ``kind`` for ``op_name.direction`` on held-out
    configs, as :func:`fit_op` scores each candidate kind (the same folds and
    fits, each config's newest run), without the other kinds, the extrapolation
    split or the final fit: what the accuracy gate re-scores on committed runs
    (:mod:`perfmodel.gate.accuracy`). ``scale`` multiplies the predictions (a
    planted error). ValueError when there are too few configs."""
    op = get_op(op_name)
    samples = newest_per_config(samples)
    keys = sorted({s.config_key for s in samples})
    if len(keys) < MIN_CONFIGS:
        raise ValueError(f"{op_name}.{direction}: {len(keys)} distinct configs measured, "
                         f"need at least {MIN_CONFIGS} to fit and hold some out")
    pred, meas = _cross_validate(kind, op, direction, device, samples, keys)
    return gmae(pred * scale, meas), len(keys)


def _same_host_setup(record: dict, device: DeviceSpec, allocator: str | None) -> bool:
    """Whether ``record`` was measured with ``device``'s thread count, with the
    cache state its op is now timed in on that CPU (:meth:`OpDef.cpu_flush_bytes`;
    records from before an op turned cold are hot ones) and, when ``allocator``
    is given, under that host allocator policy (or they do not matter: off a
    CPU, and for collectives, whose ranks share the host whatever they run).
    Off a CPU, hot records timed as the host issued the calls (timer
    ``cuda_event``, before :class:`~perfmodel.measure.timer.Timer` queued them behind a
    device hold) are left out: they timed the launches, which can take many
    times the kernels' own time."""
    measurement = record.get("measurement")
    if device.kind != "cpu":
        return not (isinstance(measurement, dict) and measurement.get("timer") == "cuda_event"
                    and measurement.get("cache", "hot") == "hot")
    try:
        op = get_op(record["op"])
    except (KeyError, ValueError):
        op = None
    if op is not None and op.family == "collective":
        return True
    cache = measurement.get("cache", "hot") if isinstance(measurement, dict) else "hot"
    if op is not None and cache != ("cold" if op.cpu_flush_bytes(device.llc_bytes) else "hot"):
        return False
    if allocator is not None and record_allocator(record) != allocator:
        return False
    threads = record.get("env", {}).get("threads")
    return device.threads is None or threads is None or threads == device.threads


def training_samples(records: Iterable[dict], device: DeviceSpec,
                     allocator: str | None = None) -> dict[tuple[str, str], list[Sample]]:
    """The samples of each (op, direction) that :func:`fit_predictors` trains on
    for ``device`` (and ``allocator``): those of records measured in its host
    setup (:func:`_same_host_setup`)."""
    return samples_from_records(r for r in records if _same_host_setup(r, device, allocator))


def fit_predictors(records: Iterable[dict], device: DeviceSpec,
                   only: Iterable[tuple[str, str]] | None = None,
                   allocator: str | None = None, workers: int | None = None) -> FitReport:
    """Fit and score every (op, direction) found in ``records`` (or just ``only``),
    on each config's newest measurements (:func:`newest_per_config`).

    On a CPU, records measured with another torch thread count than ``device``'s
    (e.g. by the single-thread ranks of a sharded sweep on one host) time a
    different machine and are left out, and so are records whose cache state is
    not the one the op is now timed in and, when ``allocator`` is given, records
    measured under another host allocator policy
    (:mod:`perfmodel.measure.allocator`); collectives, whose ranks always share the host,
    are kept.

    The (op, direction) pairs are fitted in ``workers`` processes (default:
    :func:`fit_workers`); each fit is deterministic, so the result is the same
    for any number of them.
    """
    on_cpu = device.kind == "cpu"
    report = FitReport(threads=device.threads if on_cpu else None,
                       llc_bytes=device.llc_bytes if on_cpu and device.llc_bytes else None)
    grouped = training_samples(records, device, allocator)
    wanted = set(only) if only is not None else set(grouped)
    jobs = {key: grouped.get(key, []) for key in sorted(wanted)}
    for key, (fitted, skipped) in _fit_each(jobs, device, fit_workers(workers)).items():
        if fitted is None:
            report.skipped[key] = skipped
        else:
            report.predictors[key], report.accuracy[key] = fitted
    report.host_speed = HostSpeed.median_of(
        [s.host_speed for key in report.predictors for s in newest_per_config(grouped[key])
         if s.host_speed is not None])
    return report


#: Most processes a fit uses (:func:`fit_workers`).
MAX_FIT_WORKERS = 4
#: Environment variables an MPI launcher sets in each rank: a rank fits alone.
_MPI_RANK_VARS = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS")


def fit_workers(requested: int | None = None) -> int:
    """Processes a fit uses: ``requested``, or by default one per usable core up
    to :data:`MAX_FIT_WORKERS`, and one inside an MPI rank (forking an MPI
    process is unsafe) or where processes cannot be forked."""
    if requested is not None:
        return max(1, int(requested))
    if any(v in os.environ for v in _MPI_RANK_VARS) \
            or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(MAX_FIT_WORKERS, cores or 1))


def _fit_one(key: tuple[str, str], samples: list[Sample], device: DeviceSpec
             ) -> tuple[tuple[OpPredictor, OpAccuracy] | None, str | None]:
    """(predictor, accuracy) of one (op, direction), or (None, why it cannot be fitted)."""
    try:
        return fit_op(*key, samples, device), None
    except ValueError as exc:
        return None, str(exc)


#: The jobs and device of the fit being run in forked workers, which inherit them
#: (only the keys and the results cross the pipe).
_FORKED: tuple[dict, DeviceSpec] | None = None


def _fit_forked(key: tuple[str, str]):
    jobs, device = _FORKED
    return _fit_one(key, jobs[key], device)


def _fit_each(jobs: dict[tuple[str, str], list[Sample]], device: DeviceSpec, workers: int
              ) -> dict[tuple[str, str], tuple]:
    """:func:`_fit_one` of every job, in ``workers`` forked processes (largest
    jobs first) when that is worth it; in this process when one worker is asked
    for, when there are few jobs, or when anything goes wrong in the pool: every
    job is then fitted here, so a broken pool or a result that cannot cross the
    pipe only costs time, and an error of a job itself is raised here."""
    global _FORKED
    if workers > 1 and len(jobs) >= 2 * workers:
        order = sorted(jobs, key=lambda k: -len(jobs[k]))
        _FORKED = (jobs, device)
        try:
            context = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(workers, mp_context=context) as pool:
                futures = {k: pool.submit(_fit_forked, k) for k in order}
                done = {k: futures[k].result() for k in order}
            return {k: done[k] for k in jobs}
        except Exception:  # the fallback below raises what a job itself raised
            pass
        finally:
            _FORKED = None
    return {k: _fit_one(k, samples, device) for k, samples in jobs.items()}


def fit_run_ids(records: Iterable[dict], device: DeviceSpec,
                allocator: str | None = None) -> list[str]:
    """Run ids of the measurement records :func:`fit_predictors` would train
    on for ``device`` and ``allocator`` (those of its thread count and allocator
    policy, and collectives), sorted."""
    return sorted({str(r.get("run_id")) for r in records
                   if r.get("kind") == "measurement" and _same_host_setup(r, device, allocator)})


# -- persistence -------------------------------------------------------------------

INDEX_SCHEMA = 1


def save_fit(report: FitReport, store: ResultStore, run_id: str,
             data_runs: Iterable[str] = ()) -> Path:
    """Write the fitted predictors and their accuracy under ``predictors/<run_id>/``;
    ``data_runs`` names the run files the fit was trained on. The index records
    ``report.threads``, so that :func:`load_latest_fit` can ask for a thread count."""
    folder = store.fit_dir(run_id)
    entries = []
    for (op, direction), predictor in sorted(report.predictors.items()):
        stem = f"{op}-{direction}"
        save_predictor(predictor.estimator, paths.fit_member(folder, stem))
        entries.append({"op": op, "direction": direction, "kind": predictor.kind, "stem": stem,
                        "candidate_kinds": list(candidate_kinds(get_op(op), direction)),
                        "accuracy": asdict(report.accuracy[(op, direction)])})
    write_json_atomic(paths.fit_index(folder), {"schema": INDEX_SCHEMA, "run_id": run_id,
                                              "device_key": store.device_key,
                                              "data_runs": sorted(data_runs),
                                              "threads": report.threads,
                                              "llc_bytes": report.llc_bytes,
                                              "host_speed": None if report.host_speed is None
                                              else report.host_speed.to_dict(),
                                              "entries": entries})
    return folder


def load_fit(folder: Path) -> FitReport:
    """Read a folder written by :func:`save_fit`; ValueError naming the file otherwise."""
    index_path = paths.fit_index(folder)
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{index_path}: cannot read predictor index ({exc})") from None
    if not isinstance(index, dict) or index.get("schema") != INDEX_SCHEMA:
        raise ValueError(f"{index_path}: not a perfmodel predictor index of schema {INDEX_SCHEMA}")
    runs = index.get("data_runs", [])
    if not isinstance(runs, list) or not all(isinstance(r, str) for r in runs):
        raise ValueError(f"{index_path}: 'data_runs' must be a list of run ids")
    threads = index.get("threads")
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool)
                                or threads < 1):
        raise ValueError(f"{index_path}: 'threads' must be null or an int >= 1, got {threads!r}")
    llc = index.get("llc_bytes")
    if llc is not None and (not isinstance(llc, int) or isinstance(llc, bool) or llc < 1):
        raise ValueError(f"{index_path}: 'llc_bytes' must be null or an int >= 1, got {llc!r}")
    speed = index.get("host_speed")
    key = index.get("device_key")
    report = FitReport(data_runs=tuple(runs), threads=threads,
                       host_speed=None if speed is None else HostSpeed.from_dict(
                           speed, f"{index_path}: 'host_speed'"),
                       path=Path(folder), device_key=key if isinstance(key, str) else None,
                       llc_bytes=llc)
    entries = index.get("entries", [])
    if not isinstance(entries, list):
        raise ValueError(f"{index_path}: 'entries' must be a list of predictor entries")
    for entry in entries:
        try:
            key = (entry["op"], entry["direction"])
            kind, stem = entry["kind"], entry["stem"]
            get_op(key[0])
            if kind not in PREDICTOR_KINDS or not isinstance(stem, str) or "/" in stem:
                raise ValueError(f"bad kind {kind!r} or file stem {stem!r}")
            member = paths.fit_member(folder, stem)
            report.accuracy[key] = OpAccuracy(**entry["accuracy"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{index_path}: bad entry {entry!r} ({exc})") from None
        estimator = load_predictor(member)
        without = _predates(kind, *key, estimator)
        stale = ((None if without is not None else _stale_features(kind, *key, estimator))
                 or _stale_candidates(key, entry.get("candidate_kinds")))
        if stale:
            report.skipped[key] = stale
            report.stale += (key,)
            del report.accuracy[key]
            continue
        report.predictors[key] = OpPredictor(*key, kind, estimator, without or ())
    return report


def compress_fit(folder: Path) -> tuple[int, int]:
    """Rewrite the arrays of a fit saved uncompressed (by an older perfmodel)
    compressed, predictions unchanged; (bytes of its arrays before, after).
    ValueError naming the file when the fit does not read."""
    index_path = paths.fit_index(folder)
    try:
        entries = json.loads(index_path.read_text(encoding="utf-8"))["entries"]
        stems = [paths.fit_member(folder, entry["stem"]) for entry in entries]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{index_path}: cannot read predictor index ({exc})") from None
    before = after = 0
    for stem in stems:
        old, new = compress_predictor_files(stem)
        before, after = before + old, after + new
    return before, after


def _predates(kind: str, op_name: str, direction: str, estimator) -> tuple[str, ...] | None:
    """The op's :attr:`~perfmodel.ops.base.OpDef.added_params` when ``estimator``
    was fitted before them (its rows are exactly as long as the features without
    them); ``()`` when it was fitted with them; None when neither (stale)."""
    op = get_op(op_name)
    sample = op.configs("smoke")[0]
    fitted = getattr(estimator, "n_features_in_", None)
    if fitted is None or fitted == len(features(kind, op, direction, op.dtypes[0], sample)):
        return ()
    added = tuple(op.added_params)
    if added and fitted == len(features(kind, op, direction, op.dtypes[0], sample, added)):
        return added
    return None


def _stale_features(kind: str, op_name: str, direction: str, estimator) -> str | None:
    """Why a loaded predictor cannot price ``op_name`` any more (its op gained a
    param since the fit: the feature rows are longer), or None."""
    op = get_op(op_name)
    sample = op.configs("smoke")[0]
    expected = len(features(kind, op, direction, op.dtypes[0], sample))
    fitted = getattr(estimator, "n_features_in_", expected)
    if fitted == expected:
        return None
    return (f"{op_name}.{direction}: fitted on {fitted} features, the op now has {expected} "
            f"(its params changed); re-run `pytest suites/ -m microbench` to refit")


def _stale_candidates(key: tuple[str, str], fitted_with) -> str | None:
    """Why a loaded predictor was chosen among other candidate kinds than
    :func:`candidate_kinds` offers now (a kind was added or dropped since the
    fit, or the fit predates this record), or None."""
    now = list(candidate_kinds(get_op(key[0]), key[1]))
    if fitted_with == now:
        return None
    was = ", ".join(map(str, fitted_with)) if isinstance(fitted_with, list) else "not recorded"
    return (f"{key[0]}.{key[1]}: chosen among other predictor kinds ({was}) than today's "
            f"({', '.join(now)}); the next `pytest -m accuracy` or `-m e2e` session refits")


#: What :func:`_index_threads` returns for an index it cannot read.
_UNREADABLE = object()


def _index_threads(folder: Path) -> object:
    """The ``threads`` a fit's index records (None when it records none), read
    without loading its predictors; :data:`_UNREADABLE` when the index does not
    read or holds no valid count (:func:`load_fit` then says why)."""
    try:
        index = json.loads(paths.fit_index(folder).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return _UNREADABLE
    threads = index.get("threads") if isinstance(index, dict) else _UNREADABLE
    valid = threads is None or (isinstance(threads, int) and not isinstance(threads, bool)
                                and threads >= 1)
    return threads if valid else _UNREADABLE


def index_entries(index: Mapping) -> dict[str, tuple[str, float, int]]:
    """Per ``"op.direction"`` of a fit's parsed index (``index.json``), the
    predictor kind it chose, its held-out GMAE and its config count; entries
    that do not read are left out (:func:`load_fit` names them)."""
    out = {}
    entries = index.get("entries") if isinstance(index, Mapping) else None
    for entry in entries if isinstance(entries, list) else ():
        try:
            acc = entry["accuracy"]
            out[f"{entry['op']}.{entry['direction']}"] = (str(entry["kind"]), float(acc["gmae"]),
                                                          int(acc["n_configs"]))
        except (KeyError, TypeError, ValueError):
            continue
    return out


def recorded_accuracy(folder: Path, threads: int | None, other_than: Iterable[str] = ()
                      ) -> tuple[str | None, dict[str, tuple[str, float, int]]]:
    """(name, :func:`index_entries`) of the newest fit of ``threads`` torch threads
    (None: any) under the device folder ``folder`` that was trained on other runs
    than ``other_than`` (the runs of the fit it is compared with), read from its
    index without loading its predictors; (None, {}) when there is none."""
    exclude = sorted(other_than)
    for fit_dir in reversed(paths.fit_dirs(folder)):
        recorded = _index_threads(fit_dir)
        if recorded is _UNREADABLE or (threads is not None and recorded != threads):
            continue
        try:
            index = json.loads(paths.fit_index(fit_dir).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        runs = index.get("data_runs") if isinstance(index, dict) else None
        if isinstance(runs, list) and sorted(map(str, runs)) == exclude:
            continue  # the same data: the fit itself, or another worker's copy of it
        return fit_dir.name, index_entries(index)
    return None, {}


def load_latest_fit(store: ResultStore, threads: int | None = None
                    ) -> tuple[FitReport | None, list[str]]:
    """The newest loadable fit of ``store`` and the problems met on the way.

    With ``threads``, the newest fit trained on CPU measurements taken with that
    many torch threads; fits saved without a thread count never match it."""
    problems: list[str] = []
    for folder in reversed(paths.fit_dirs(store.dir)):
        recorded = _index_threads(folder)
        if threads is not None and recorded is not _UNREADABLE and recorded != threads:
            continue  # another thread count's fit: not worth loading its predictors
        try:
            fit = load_fit(folder)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        if threads is None or fit.threads == threads:
            return fit, problems
    return None, problems


def current_fit(store: ResultStore, device: DeviceSpec, run_id: str
                ) -> tuple[FitReport | None, list[str]]:
    """The fit that predicts for ``device`` now, and the problems met loading
    the stored data: the newest stored fit of its thread count when it was
    trained on exactly the run files that qualify now (:func:`fit_run_ids`, at
    this process's allocator policy) and none of its predictors is stale (so
    repeated E2E runs predict with the same model); otherwise, after new
    measurements say, a fresh fit of every qualifying record, saved as
    ``run_id``'s. With no qualifying measurements, the newest fit of that thread
    count (None when there is none)."""
    from perfmodel.measure.allocator import allocator_policy

    loaded = store.load("measurement")
    latest, problems = load_latest_fit(store, threads=device.threads)
    allocator = allocator_policy()
    runs = fit_run_ids(loaded.records, device, allocator)
    if runs and (latest is None or list(latest.data_runs) != runs or latest.stale):
        fit = fit_predictors(loaded.records, device, allocator=allocator)
        fit.data_runs = tuple(runs)
        save_fit(fit, store, run_id, runs)
        return fit, loaded.problems + problems
    return latest, loaded.problems + problems


# -- stale fits and refitting ----------------------------------------------------------


def refit_command(device_key: str, threads: int | None) -> str:
    """The command that refits ``device_key``'s fit of ``threads`` torch threads
    from its stored measurement runs (:func:`refit`)."""
    return f"perfmodel refit --device {device_key}" + (
        "" if threads is None else f" --threads {threads}")


class StaleFit(ValueError):
    """A stored fit that today's code cannot use whole: some of its predictors
    are stale (:attr:`FitReport.stale`: their op's params, or the predictor
    kinds it is chosen among, changed since the fit). Predicting with the rest
    would leave those ops' time unmodelled without a word, so the prediction
    paths refuse it with this one line, which names the fit, how many
    predictors are stale and why (the first reason), and the command that
    refits (:func:`refit_command`)."""

    def __init__(self, fit: FitReport, device_key: str | None = None):
        self.fit = fit
        self.device_key = device_key or fit.device_key or "<device-key>"
        self.command = refit_command(self.device_key, fit.threads)
        total = len(fit.stale) + len(fit.predictors)
        first = fit.skipped.get(fit.stale[0], "") if fit.stale else ""
        why = first.partition("; ")[0]  # the reason, without the older hint that follows
        name = fit.path.as_posix() if fit.path is not None else "the fit"
        threads = "" if fit.threads is None else f" ({fit.threads} thread(s))"
        super().__init__(f"stale fit {name}{threads}: {len(fit.stale)} of {total} predictors "
                         f"cannot be used by today's code (first: {why}); run `{self.command}`")


def require_current(fit: FitReport | None, device_key: str | None = None) -> FitReport | None:
    """``fit`` when none of its predictors is stale (None stays None);
    :class:`StaleFit` otherwise."""
    if fit is not None and fit.stale:
        raise StaleFit(fit, device_key)
    return fit


def stored_spec(store: ResultStore, threads: int | None) -> DeviceSpec:
    """The device spec stored under ``store`` for ``threads`` torch threads (its
    ``device.json``, or ``device-<N>threads.json``; any thread count when
    ``threads`` is None: ``device.json``'s); ValueError naming the folder when
    none is stored."""
    candidates = [paths.spec_file(store.dir), *paths.threads_spec_files(store.dir).values()]
    problems = []
    for path in candidates:
        if not path.is_file():
            continue
        try:
            spec = DeviceSpec.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, ValueError, TypeError) as exc:
            problems.append(f"{path}: {exc}")
            continue
        if spec.key != store.device_key:
            problems.append(f"{path}: describes {spec.key}, not {store.device_key}")
            continue
        if threads is None or spec.kind != "cpu" or spec.threads == threads:
            return spec
    what = "" if threads is None else f" for {threads} thread(s)"
    why = f" ({'; '.join(problems)})" if problems else ""
    raise ValueError(f"no device spec{what} under {store.dir}{why}; refit on that machine, "
                     f"where `perfmodel devices --threads N` stores one")


def runs_allocator(records: Sequence[dict], device: DeviceSpec) -> str | None:
    """The host allocator policy a refit of ``device`` uses: the one its newest
    measurement run at ``device``'s thread count (collectives left out, whose
    ranks share the host whatever they run) was measured under; None off a CPU
    or without such a run."""
    if device.kind != "cpu":
        return None
    newest: tuple[str, str] | None = None
    for record in records:
        if record.get("kind") != "measurement" or not _same_host_setup(record, device, None):
            continue
        try:
            if get_op(record["op"]).family == "collective":
                continue
        except (KeyError, ValueError):
            continue
        run = str(record.get("run_id"))
        if newest is None or run > newest[0]:
            newest = (run, record_allocator(record))
    return None if newest is None else newest[1]


def refit(store: ResultStore, device_key: str | None = None, threads: int | None = None,
          device: DeviceSpec | None = None, run_id: str | None = None,
          allocator: str | None = None, same_runs: bool = False
          ) -> tuple[FitReport, Path, list[str]]:
    """Fit ``device_key``'s predictors again from its stored measurement runs
    at ``threads`` torch threads, as a session would (:func:`current_fit`'s
    selection: :func:`fit_run_ids`, under the allocator policy of the newest
    such run, :func:`runs_allocator`), and save the fit as ``predictors/<run_id>/``
    (default: a new run id, so it is the newest). Deterministic: the same runs
    give the same predictors (seeded folds, seeded forests). ``device``: the
    spec to fit for (default: the one stored for that thread count,
    :func:`stored_spec`); ``threads`` None means the spec's; ``allocator``: the
    policy whose CPU runs to fit on instead of the newest run's; ``same_runs``:
    train on exactly the runs the newest fit of that thread count was trained
    on (ValueError naming those not stored), so only the code changes. Returns
    the fit, its folder and the problems met loading the runs; ValueError when
    no run qualifies."""
    from dataclasses import replace as _replace

    from perfmodel.store.results import new_run_id

    if device_key is not None and device_key != store.device_key:
        store = ResultStore(store.root, device_key)
    spec = device if device is not None else stored_spec(store, threads)
    if spec.kind == "cpu" and threads is not None and spec.threads != threads:
        spec = _replace(spec, threads=threads)
    loaded = store.load("measurement")
    if same_runs:
        loaded.records[:] = _records_of_newest_fit(store, spec, loaded.records)
    if allocator is None:
        allocator = runs_allocator(loaded.records, spec)
    runs = fit_run_ids(loaded.records, spec, allocator)
    what = "" if spec.threads is None or spec.kind != "cpu" else f" at {spec.threads} thread(s)"
    if not runs:
        raise ValueError(f"no measurement runs{what} to refit from under {store.runs_dir}")
    fitted = fit_predictors(loaded.records, spec, allocator=allocator)
    if not fitted.predictors:
        why = next(iter(fitted.skipped.values()), "nothing to fit")
        raise ValueError(f"nothing could be fitted from the runs{what} under "
                         f"{store.runs_dir} ({why})")
    fitted.data_runs = tuple(runs)
    if run_id is None:  # one that sorts after every stored fit: the newest, the one used
        newest = max((p.name for p in paths.fit_dirs(store.dir)), default="")
        run_id = new_run_id()
        for _ in range(15):  # a fit saved this second; bounded: a fit named otherwise
            if run_id > newest:
                break
            time.sleep(0.1)
            run_id = new_run_id()
    folder = save_fit(fitted, store, run_id, runs)
    fitted.path, fitted.device_key = folder, store.device_key
    return fitted, folder, loaded.problems


def _records_of_newest_fit(store: ResultStore, spec: DeviceSpec, records: list[dict]
                           ) -> list[dict]:
    """The ``records`` of the runs the newest fit of ``spec``'s thread count was
    trained on; ValueError when there is no such fit or a run is not stored."""
    threads = spec.threads if spec.kind == "cpu" else None
    latest, _ = load_latest_fit(store, threads=threads)
    if latest is None or not latest.data_runs:
        raise ValueError(f"no fit{'' if threads is None else f' of {threads} thread(s)'} "
                         f"recording its training runs under {store.dir}")
    wanted = set(latest.data_runs)
    missing = sorted(wanted - {str(r.get("run_id")) for r in records})
    if missing:
        raise ValueError(f"{len(missing)} of the {len(wanted)} runs fit {latest.path.name} was "
                         f"trained on are not under {store.runs_dir} (first: {missing[0]})")
    return [r for r in records if str(r.get("run_id")) in wanted]


def gmae_summary(fit: FitReport) -> str:
    """One line over ``fit``'s per-op held-out accuracy: predictors, skipped
    ops, the median and worst held-out GMAE and the median noise floor."""
    accs = sorted(fit.accuracy.values(), key=lambda a: a.gmae)
    if not accs:
        return f"per-op GMAE: no predictors ({len(fit.skipped)} skipped)"
    worst = accs[-1]
    floors = sorted(a.noise_floor for a in accs if a.noise_floor is not None)
    floor = f"{floors[len(floors) // 2]:.1%}" if floors else "n/a"
    return (f"per-op GMAE over {len(accs)} predictors ({len(fit.skipped)} skipped): median "
            f"{accs[len(accs) // 2].gmae:.1%}, worst {worst.gmae:.1%} ({worst.name}); "
            f"median noise floor {floor}")
