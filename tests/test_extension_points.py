"""Extending perfmodel without editing it: ``perfmodel.ops`` / ``perfmodel.workloads``
entry points, ``register_op`` calls, and the README's custom-op example run as a
user's own project would run it (pytester, in a subprocess)."""

import json
import re
import textwrap

import pytest

from perfmodel.ops import OPS, _builtin_ops, _op_definitions
from perfmodel.registry import BUILTIN, Registry, RegistryError
from perfmodel.workloads import ALL_WORKLOADS
from tests.helpers import REPO, THREADS, plant_cpu_spec, run_lines, run_paths

#: The custom-op example, tested here as a user's module ``my_ops.py``; the README
#: shows it (or its own variant, also run below) between the custom-op-example markers.
EXAMPLE = '''\
"""my_ops.py: our fused bias + GELU kernel, known to perfmodel like a built-in op."""
import torch

import perfmodel


@torch.library.custom_op("mylib::bias_gelu", mutates_args=())
def bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x + bias)  # stands in for the fused kernel


class BiasGelu(perfmodel.OpDef):
    """gelu(x + bias) over a ROWS x COLS float32 activation: reads x and bias, writes y."""

    name, family, params = "bias_gelu", "fused", ("ROWS", "COLS")
    trace_names = ("mylib::bias_gelu",)  # its node in a captured trace

    def generate_configs(self, profile):  # the shapes to sweep, deterministic
        count = {"smoke": 6, "quick": 24, "gpu": 24, "full": 96}[profile]
        return [{"ROWS": 16 << (i % 5), "COLS": 64 * (i + 1)} for i in range(count)]

    def make_runner(self, params, dtype, direction, device):  # the call to time
        x = torch.randn(params["ROWS"], params["COLS"], device=device)
        bias = torch.randn(params["COLS"], device=device)
        return lambda: bias_gelu(x, bias)

    def flops(self, params, direction):  # FLOP per call: the add and an erf GELU
        return 9.0 * params["ROWS"] * params["COLS"]

    def bytes_moved(self, params, dtype, direction):  # B per call: read x, bias; write y
        return 4.0 * (2 * params["ROWS"] * params["COLS"] + params["COLS"])

    def params_from_shapes(self, input_shapes):  # a trace node's config, or None
        x, bias = (list(s) for s in input_shapes[:2])
        return {"ROWS": x[0], "COLS": x[1]} if len(x) == 2 and bias == x[1:] else None


BIAS_GELU = BiasGelu()
perfmodel.register_op(BIAS_GELU)
'''

README_MARKERS = ("<!-- custom-op-example -->", "<!-- /custom-op-example -->")


def readme_example() -> str | None:
    """The python block between the README's custom-op-example markers, or None."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start, end = text.find(README_MARKERS[0]), text.find(README_MARKERS[1])
    if start < 0 or end < start:
        return None
    block = re.search(r"```python\n(.*?)```", text[start:end], re.DOTALL)
    return block.group(1) if block else None


def example_parts(source: str) -> tuple[str, str, str]:
    """(op name, the object its last ``register_op(...)`` line registers, the
    source without that line)."""
    name = re.search(r'^\s+name\b[^=\n]*=\s*"(\w+)"', source, re.MULTILINE)
    call = re.search(r"^(?:perfmodel\.)?register_op\((\w+)(\(\))?\)\n", source, re.MULTILINE)
    assert name and call, "the example names its op and ends with a register_op(...) line"
    return name.group(1), call.group(1), source[:call.start()] + source[call.end():]


def write_dist(root, name: str, entry_points: dict[str, dict[str, str]],
               modules: dict[str, str] | None = None) -> None:
    """An installed distribution ``name`` 0.1 under ``root`` (a sys.path entry):
    its metadata, its entry points and its top-level ``modules`` (name: source)."""
    info = root / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n"
        for group, eps in entry_points.items()))
    for module, source in (modules or {}).items():
        (root / f"{module}.py").write_text(textwrap.dedent(source))


# -- entry point discovery, in this process on a fresh registry -------------------------

#: A module defining test ops: an instance, a class and a list of instances.
EP_OPS = textwrap.dedent("""
    from perfmodel.ops.base import OpDef


    class Doubled(OpDef):
        name, family, params = "ep_doubled", "test", ("N",)

        def generate_configs(self, profile):
            return [{"N": 8}, {"N": 16}]

        def make_runner(self, params, dtype, direction, device):
            return lambda: None


    class Tripled(Doubled):
        name = "ep_tripled"


    ONE = Doubled()
    MANY = [type("A", (Doubled,), {"name": "ep_a"})(), type("B", (Doubled,), {"name": "ep_b"})()]
    """)


@pytest.fixture
def fresh_ops(monkeypatch, tmp_path):
    """``(registry, site)``: an op registry like :data:`perfmodel.ops.OPS`, not yet
    filled, that reads the entry points of ``site`` (a sys.path entry) too; and
    how many times it loaded the built-ins."""
    len(OPS), len(ALL_WORKLOADS)  # the real registries are filled before site joins sys.path
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    calls = []

    def builtins():
        calls.append(1)
        return _builtin_ops()

    registry = Registry("op", "perfmodel.ops", builtins, _op_definitions, lambda op: op.name)
    return registry, site, calls


def test_entry_points_are_read_on_the_first_lookup(fresh_ops):
    registry, site, calls = fresh_ops
    write_dist(site, "user-ops", {"perfmodel.ops": {
        "one": "ep_mod_ok:ONE", "cls": "ep_mod_ok:Tripled", "many": "ep_mod_ok:MANY"}},
        {"ep_mod_ok": EP_OPS})
    assert "not loaded" in repr(registry) and not calls  # nothing read yet
    assert "ep_doubled" in registry and calls == [1]
    assert {"ep_doubled", "ep_tripled", "ep_a", "ep_b"} <= set(registry)
    assert type(registry["ep_tripled"]).__name__ == "Tripled"  # a class is instantiated
    assert registry.source("ep_a") == ("perfmodel.ops entry point 'many = ep_mod_ok:MANY' "
                                       "(package user-ops 0.1)")
    assert registry.source("linear") == BUILTIN and len(registry) == len(OPS) + 4
    registry.lookup("ep_b")
    assert calls == [1]  # read once


@pytest.mark.parametrize("value, module, cause", [
    ("ep_missing_mod:OPS", None,
     "failed to load: ModuleNotFoundError: No module named 'ep_missing_mod'"),
    ("ep_mod_raises:OPS", "raise RuntimeError('no GPU library here')",
     "failed to load: RuntimeError: no GPU library here"),
    ("ep_mod_attr:NOPE", "OPS = ()", "failed to load: AttributeError: .*NOPE"),
    ("ep_mod_int:OPS", "OPS = 42",
     r": got 42 \(int\); expected an OpDef instance, an OpDef subclass, or an iterable of them"),
    ("ep_mod_list:OPS", "OPS = ['relu']", r": got an iterable holding 'relu' \(str\)"),
    ("ep_mod_dup:OPS", "from perfmodel.ops import get_op\nOPS = [type(get_op('relu'))('relu')]",
     r": op 'relu' is already registered \(built in\)"),
    ("ep_mod_bad:OPS", EP_OPS + "\nOPS = [type('Bad', (Doubled,), {'directions': ()})()]",
     r": op 'ep_doubled' \(ep_mod_bad.Bad\): directions \(\) are not among"),
])
def test_a_broken_entry_point_is_one_error_naming_it_and_its_package(fresh_ops, value, module,
                                                                      cause):
    registry, site, _ = fresh_ops
    modules = {value.partition(":")[0]: module} if module else {}
    write_dist(site, "user-broken", {"perfmodel.ops": {"bad": value}}, modules)
    label = re.escape(f"perfmodel.ops entry point 'bad = {value}' (package user-broken 0.1)")
    for _ in range(2):  # the next lookup fails the same way: nothing is half-registered
        with pytest.raises(RegistryError, match=f"^{label}{'' if cause[0] == ':' else ' '}"
                                                f"{cause}") as info:
            registry.lookup("linear")
    assert isinstance(info.value, ValueError)  # the plugin reports it as a usage error


def test_an_entry_point_module_may_call_register_op_itself(fresh_ops, monkeypatch):
    """A module that registers at import and also names the op in its entry
    point registers it once (the same object)."""
    registry, site, _ = fresh_ops
    monkeypatch.setattr("perfmodel.ops.OPS", registry)  # register_op registers into it
    write_dist(site, "user-self", {"perfmodel.ops": {"one": "ep_mod_self:ONE"}},
               {"ep_mod_self": EP_OPS + "\nimport perfmodel\nperfmodel.register_op(ONE)\n"})
    assert registry.lookup("ep_doubled") is registry["ep_doubled"]
    assert registry.source("ep_doubled") == "registered by a call"


def test_workload_entry_points_join_the_single_and_multirank_registries(fresh_ops):
    from perfmodel.registry import RegistryView
    from perfmodel.workloads import _MULTIRANK_CONFIGS, _workload_definitions, is_multirank

    _, site, _ = fresh_ops
    write_dist(site, "user-workloads", {"perfmodel.workloads": {"ws": "ep_mod_wl:WORKLOADS"}},
               {"ep_mod_wl": """
                   from perfmodel.workloads.ddp import DDPConfig
                   from perfmodel.workloads.mlp import MLPConfig

                   WORKLOADS = (MLPConfig(name="ep_mlp", batch=8, widths=(8, 1)),
                                DDPConfig(name="ep_ddp", world_sizes=(2,)))
                   """})
    registry = Registry("workload", "perfmodel.workloads", lambda: _MULTIRANK_CONFIGS,
                        _workload_definitions, lambda cfg: cfg.name)
    single = RegistryView(registry, lambda cfg: not is_multirank(cfg), "workload")
    multi = RegistryView(registry, is_multirank, "multi-rank workload")
    assert list(single) == ["ep_mlp"] and list(multi) == ["ddp_mlp", "dlrm_mp", "ep_ddp"]
    with pytest.raises(ValueError, match="unknown workload 'ep_ddp': known workloads are ep_mlp"):
        single.lookup("ep_ddp")


# -- a user's project, run by pytest in a subprocess -------------------------------------

@pytest.fixture
def user_project(pytester):
    """A user's project directory (pytester's), whose subprocess runs find a
    planted CPU spec in ``results``: ``(pytester, results, device key, run)``,
    where ``run(*args)`` runs pytest there with the plugin on the smoke profile."""
    results = pytester.path.parent / f"{pytester.path.name}-results"
    key = plant_cpu_spec(results)

    def run(*args):
        return pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", f"--perfmodel-results={results}",
            f"--perfmodel-threads={THREADS}", "--perfmodel-profile=smoke",
            "--perfmodel-budget=0.05", *args, timeout=600)

    return pytester, results, key, run


SUITE = """
import pytest

from pytest_perfmodel.suite import test_accuracy, test_microbench  # noqa: F401

pytestmark = pytest.mark.perfmodel_ops("{name}")
"""

#: A captured call of the op maps back to the op and the config it ran.
TRACE_CHECK = """
from perfmodel.ops import get_op
from perfmodel.trace.graph import build_graph
from perfmodel.trace.parse import capture_trace, load_trace


def test_a_captured_call_maps_to_the_op(tmp_path):
    op = get_op("{name}")
    config = op.configs("smoke")[-1]
    files = capture_trace(op.make_runner(config, "float32", "forward", "cpu"), tmp_path, "step")
    graph = build_graph(load_trace(files.et, files.kineto, files.calibration))
    assert [(t.name, t.op, t.params) for t in graph.op_tasks()] == [
        (op.trace_names[0], "{name}", config)]
"""

PYPROJECT = """
[tool.perfmodel]
smoke_gmae_threshold = 5.0

[tool.perfmodel.gmae_thresholds]
"{name}.forward" = 0.5
"""


def stored_measurements(results, key, op: str) -> list[dict]:
    records = [json.loads(line) for path in run_paths(results / key)
               for line in run_lines(path)]
    return [r for r in records if r.get("kind") == "measurement" and r["op"] == op]


def passed_ids(out, test: str) -> list[str]:
    """The parameter ids of ``test``'s items that ``-v`` reported PASSED."""
    return [m.group(1) for line in out.stdout.lines
            if (m := re.search(rf"::{test}\[(.+?)\] PASSED", line))]


def case_of(case_id: str) -> tuple[str, str, tuple]:
    """(direction, dtype, sorted config items) of an op case's pytest id."""
    _, direction, dtype, *shape = case_id.split("-")
    return direction, dtype, tuple(sorted((m[1], int(m[2])) for m in
                                          (re.fullmatch(r"(\D+)(\d+)", s) for s in shape)))


def check_op_runs(run, results, key, name: str):
    """Microbenchmark ``name``, then score its fit and map a captured call of it
    (with the project's other items but microbenchmarks); returns the second run."""
    out = run("-m", "microbench", "-v")
    assert out.ret == 0, out.stdout.str()[-4000:]
    measured = passed_ids(out, "test_microbench")
    assert measured and all(i.startswith(f"{name}-forward-") for i in measured)
    out.assert_outcomes(passed=len(measured))
    records = stored_measurements(results, key, name)
    stored = {(r["direction"], r["dtype"], tuple(sorted(r["config"].items()))) for r in records}
    assert stored == {case_of(i) for i in measured} and len(records) == 2 * len(measured)
    out = run("-m", "accuracy or not microbench", "-v")
    assert out.ret == 0, out.stdout.str()[-4000:]
    assert passed_ids(out, "test_accuracy") == [f"{name}.forward"]
    out.stdout.fnmatch_lines(["*::test_a_captured_call_maps_to_the_op PASSED*"])
    return out


@pytest.mark.parametrize("source", ["test copy", "README"])
def test_a_custom_op_registered_in_a_conftest_runs_every_stage(user_project, source):
    pytester, results, key, run = user_project
    example = EXAMPLE if source == "test copy" else readme_example()
    if example is None:
        pytest.skip(f"README.md has no python block between {' and '.join(README_MARKERS)}; "
                    f"the test copy of the example ran instead")
    name, _, _ = example_parts(example)
    (pytester.path / "my_ops.py").write_text(example)
    (pytester.path / "conftest.py").write_text("import my_ops  # noqa: F401  (registers it)\n")
    (pytester.path / "pyproject.toml").write_text(PYPROJECT.format(name=name))
    (pytester.path / f"test_{name}.py").write_text(SUITE.format(name=name))
    (pytester.path / "test_trace_mapping.py").write_text(TRACE_CHECK.format(name=name))
    check_op_runs(run, results, key, name).assert_outcomes(passed=2)


def test_entry_points_bring_an_op_and_a_workload_to_the_plugin_and_the_suites(user_project):
    """An installed package's entry points: its op runs every stage, its workload
    runs in a user's E2E suite, and the repository's suites list both."""
    pytester, results, key, run = user_project
    name, registered, module = example_parts(EXAMPLE)
    write_dist(pytester.path, "user-ops", {
        "perfmodel.ops": {name: f"my_ops:{registered}"},
        "perfmodel.workloads": {"user_mlp": "user_workloads:USER_MLP"}},
        {"my_ops": module, "user_workloads": """
            from perfmodel.workloads.mlp import MLPConfig

            USER_MLP = MLPConfig(name="user_mlp", batch=8, widths=(8, 16, 1))
            """})
    (pytester.path / "pyproject.toml").write_text(PYPROJECT.format(name=name))
    (pytester.path / f"test_{name}.py").write_text(SUITE.format(name=name))
    (pytester.path / "test_trace_mapping.py").write_text(TRACE_CHECK.format(name=name))
    (pytester.path / "test_user_e2e.py").write_text(
        "import pytest\n\n"
        "pytestmark = [pytest.mark.e2e, pytest.mark.perfmodel_workloads('user_mlp')]\n\n\n"
        "def test_e2e(workload, perfmodel_session):\n"
        "    perfmodel_session.run_e2e(workload)\n")
    out = check_op_runs(run, results, key, name)
    out.stdout.fnmatch_lines(["test_user_e2e.py::test_e2e[[]user_mlp[]] PASSED*"])
    out.assert_outcomes(passed=3)
    suites = REPO / "suites"
    out = run("--collect-only", "-q", str(suites / "test_e2e.py"),
              str(suites / "test_registered_ops.py"))
    assert out.ret == 0, out.stdout.str()
    for line in ["suites/test_e2e.py::test_e2e[[]user_mlp[]]",  # the plugin orders by stage
                 f"suites/test_registered_ops.py::test_microbench[[]{name}-forward-*",
                 f"suites/test_registered_ops.py::test_accuracy[[]{name}.forward[]]"]:
        out.stdout.fnmatch_lines([line])


def test_a_broken_entry_point_stops_the_session_with_one_error(user_project):
    pytester, _, _, run = user_project
    write_dist(pytester.path, "user-broken", {"perfmodel.ops": {"fused": "user_gone:FUSED"}})
    (pytester.path / "test_fused.py").write_text(SUITE.format(name="fused"))
    out = run("--collect-only", "-q")
    text = out.stdout.str() + out.stderr.str()
    assert out.ret in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.USAGE_ERROR), text
    assert re.search(r"test_fused\.py::test_\w+: perfmodel\.ops entry point "
                     r"'fused = user_gone:FUSED' \(package user-broken 0\.1\) failed to load: "
                     r"ModuleNotFoundError: No module named 'user_gone'", text), text
    assert re.search(r"no tests collected, 1 error\b", text), text
