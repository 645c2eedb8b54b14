"""Leave-one-workload-out comparison of four ways to price the nodes no op definition knows,
on the committed replay cases of cpu-amd-epyc-f25m1-2c (the tuning set: the single-rank workloads
and the zoo's tuning half). Run from the repository root; see
docs/journal/2026-11-27-any-model.md."""
import math, statistics
from perfmodel.replay.case import load_case
from perfmodel.store.results import ResultStore
from perfmodel.store import paths
from perfmodel.fit.fitting import load_latest_fit
from perfmodel.fit.generic import generic_model
from perfmodel.trace.overheads import load_all_samples, table_from_samples
from perfmodel.simulate.predict import sim_tasks, generic_priced
from perfmodel.simulate.walk import simulate
import perfmodel.simulate.predict as P
store = ResultStore("results", "cpu-amd-epyc-f25m1-2c")
fit, _ = load_latest_fit(store, threads=2)
gm = generic_model(fit)
samples, _ = load_all_samples(store.dir / "overheads")
cases = {w: load_case(p) for w, p in paths.replay_files(store.dir).items() if "@" not in w}
# per-case generic tasks: (category dominant, traced net, generic predicted)
def gen_rows(case):
    g = case.graphs[0]; rows = []
    for t in g.tasks:
        if t.kind == "unmodelled" and generic_priced(t, False) and t.measured_s:
            net = max(0.0, t.measured_s - g.profiler_overhead_s * t.n_nodes)
            cat = max(t.parts, key=lambda c: t.parts[c][1])
            rows.append((cat, net, gm.seconds(t.parts), t.name))
    return rows
rows = {w: gen_rows(c) for w, c in cases.items()}
def factors(exclude):
    by = {}
    for w, rs in rows.items():
        if w == exclude: continue
        for cat, net, pred, _ in rs:
            if pred > 0: by.setdefault(cat, []).append(net / pred)
    return {c: statistics.median(v) for c, v in by.items()}, statistics.median([x for v in by.values() for x in v])
print("all-tuning factors", factors(None))
orig_leaf = {}
results = {}
for variant in ("generic", "name-then-generic", "generic-x-factor", "table-only"):
    errs = []
    for w, case in sorted(cases.items()):
        table = table_from_samples([s for s in samples if s.workload != w], case.bandwidth_Bps)  # LOWO
        fac, glob = factors(w)
        class GM:
            lines = gm.lines
            def seconds(self, parts, fac=fac, glob=glob):
                if variant != "generic-x-factor":
                    return gm.seconds(parts)
                cat = max(parts, key=lambda c: parts[c][1])
                return fac.get(cat, glob) * gm.seconds(parts)
        if variant == "table-only":
            gen = False
        else:
            gen = GM()
        if variant == "name-then-generic":
            seen = {n for n, v in table.leaf.items()}
            saved = P.generic_priced
            P.generic_priced = lambda t, d, seen=seen, saved=saved: saved(t, d) and t.name not in seen
        tasks, _ = sim_tasks(case.graphs[0], fit, table, False, generic=gen)
        if variant == "name-then-generic":
            P.generic_priced = saved
        pred = simulate(tasks, keep_timeline=False).total_s
        e = pred / case.measured.median_s - 1
        errs.append((w, e))
    gmae = math.exp(sum(math.log(abs(e) + 4e-4) for _, e in errs) / len(errs))
    results[variant] = errs
    print(f"{variant:20s} LOWO GMAE {gmae:.2%}  " + " ".join(f"{w[:10]}:{e:+.1%}" for w, e in errs))
