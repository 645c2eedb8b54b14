"""End-to-end workloads: every registered one builds and trains (as its tiny
variant), the DLRM interaction is right, and missing packages fail clearly."""

import math
import subprocess
import sys

import pytest

from perfmodel.workloads import (ALL_WORKLOADS, MULTIRANK_WORKLOADS, WORKLOADS, build_workload,
                                 get_multirank_workload, get_workload, register_workload)
from perfmodel.workloads.ddp import DDPConfig
from perfmodel.workloads.dlrm import GPU_TABLE_BUDGET_BYTES, DLRMConfig, dot_interaction
from perfmodel.workloads.mlp import MLPConfig


def build_or_skip(cfg, seed=0):
    """``cfg`` built on cpu; skipped when its optional package is missing."""
    try:
        return cfg.build("cpu", seed)
    except ImportError as exc:
        if "is not installed" in str(exc):
            pytest.skip(str(exc))
        raise


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_tiny_workload_trains(name):
    torch = pytest.importorskip("torch")
    cfg = get_workload(name).tiny()
    built = build_or_skip(cfg)
    assert built.name == f"{name}_tiny" and built.items == cfg.batch and built.model.training
    params = {n: p for n, p in built.model.named_parameters() if p.requires_grad and p.numel()}
    before = {n: p.detach().clone() for n, p in params.items()}
    loss = built.step()
    assert loss.dim() == 0 and math.isfinite(loss.item())
    unchanged = [n for n, p in params.items() if torch.equal(before[n], p.detach())]
    assert not unchanged, f"a step left {unchanged} unchanged"
    # the seed fixes weights, data and dropout: a rebuild repeats the first loss
    assert build_or_skip(cfg).step().item() == pytest.approx(loss.item(), rel=1e-6)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_variants_keep_the_workload(name):
    cfg = get_workload(name)
    tiny, full = cfg.tiny(), cfg.full_size()
    assert (type(tiny), tiny.kind, tiny.name) == (type(cfg), cfg.kind, f"{name}_tiny")
    assert (type(full), full.kind, full.name) == (type(cfg), cfg.kind, f"{name}_full")
    assert tiny.batch <= cfg.batch <= full.batch


def test_unknown_workload_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown workload 'nope'") as info:
        get_workload("nope")
    assert all(name in str(info.value) for name in WORKLOADS)
    with pytest.raises(ValueError, match="size must be one of"):
        build_workload("mlp_small", "cpu", size="huge")


def test_build_workload_builds_the_requested_variant():
    pytest.importorskip("torch")
    built = build_workload("mlp_small", "cpu", size="tiny")
    assert (built.name, built.items) == ("mlp_small_tiny", WORKLOADS["mlp_small"].tiny().batch)


def test_importing_the_registry_does_not_import_torch():
    code = "import sys, perfmodel.workloads; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_dot_interaction_is_the_pairwise_dot_products():
    torch = pytest.importorskip("torch")
    b, d, tables = 3, 4, 3
    bottom = torch.randn(b, d)
    pooled = [torch.randn(b, d) for _ in range(tables)]
    li, lj = torch.tril_indices(tables + 1, tables + 1, offset=-1)
    out = dot_interaction(bottom, pooled, li, lj)
    features = [bottom, *pooled]
    pairs = [(features[i] * features[j]).sum(1) for i in range(tables + 1) for j in range(i)]
    torch.testing.assert_close(out, torch.cat([bottom, torch.stack(pairs, 1)], 1))


@pytest.mark.parametrize("backend", ["embedding_bag", "tbe"])
def test_dlrm_top_mlp_sees_the_interaction_width(backend):
    pytest.importorskip("torch")
    cfg = DLRMConfig(backend=backend, index_distribution="zipf").tiny()
    built = build_or_skip(cfg)
    widths = []
    built.model.top.register_forward_hook(lambda mod, args, out: widths.append(args[0].shape[1]))
    built.step()
    n = len(cfg.table_rows) + 1
    assert widths == [n * (n - 1) // 2 + cfg.bottom_mlp[-1]] == [cfg.interaction_width]


def test_dlrm_mlperf_full_size_fits_the_gpu_budget():
    cpu, full = get_workload("dlrm_mlperf"), get_workload("dlrm_mlperf").full_size()
    assert len(full.rows) == 26 and cpu.embedding_bytes < 1.5e9
    assert cpu.embedding_bytes < full.embedding_bytes <= GPU_TABLE_BUDGET_BYTES


def test_dlrm_rejects_a_bottom_mlp_that_misses_the_embedding_dim():
    with pytest.raises(ValueError, match="bottom_mlp must end at embedding_dim=32"):
        DLRMConfig(bottom_mlp=(64, 16), embedding_dim=32)


@pytest.mark.parametrize("cfg, modules, message", [
    (DLRMConfig(backend="tbe").tiny(),
     ("fbgemm_gpu", "fbgemm_gpu.split_table_batched_embeddings_ops_training"),
     "fbgemm_gpu is not installed"),
    (WORKLOADS["hf_gpt2"].tiny(), ("transformers",),
     "transformers is not installed; pip install transformers"),
])
def test_missing_package_is_a_clear_import_error(monkeypatch, cfg, modules, message):
    pytest.importorskip("torch")
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ImportError, match=message):
        cfg.build("cpu")


# -- registering workloads (perfmodel.register_workload) --------------------------------

USER_MLP = MLPConfig(name="user_mlp", batch=8, widths=(8, 16, 1))


@pytest.fixture
def registered():
    """Names to unregister after the test (the registry is process-wide)."""
    names = []
    yield names
    for name in names:
        if name in ALL_WORKLOADS:
            ALL_WORKLOADS.unregister(name)


def test_a_registered_workload_is_known_by_name(registered):
    assert register_workload(USER_MLP) is USER_MLP
    registered.append("user_mlp")
    assert get_workload("user_mlp") is USER_MLP and "user_mlp" in WORKLOADS
    assert list(WORKLOADS)[-1] == "user_mlp" and "user_mlp" not in MULTIRANK_WORKLOADS
    built = build_workload("user_mlp", "cpu", size="tiny")
    assert (built.name, built.items) == ("user_mlp_tiny", 8)


def test_a_multirank_workload_joins_the_multirank_registry(registered):
    user_ddp = DDPConfig(name="user_ddp", world_sizes=(2,))
    register_workload(user_ddp)
    registered.append("user_ddp")
    assert get_multirank_workload("user_ddp") is user_ddp and "user_ddp" not in WORKLOADS
    with pytest.raises(ValueError, match="unknown workload 'user_ddp'"):
        get_workload("user_ddp")
    with pytest.raises(ValueError, match=r"multi-rank workload 'no_sizes' needs world_sizes"):
        register_workload(DDPConfig(name="no_sizes", world_sizes=()))


def test_register_workload_refuses_a_taken_name_unless_replacing(registered):
    register_workload(USER_MLP)
    registered.append("user_mlp")
    other = MLPConfig(name="user_mlp", batch=4, widths=(4, 1))
    with pytest.raises(ValueError, match=r"workload 'user_mlp' is already registered "
                                         r"\(registered by a call\).*replace=True"):
        register_workload(other)
    assert register_workload(other, replace=True) is other and get_workload("user_mlp") is other
    # one namespace for single- and multi-rank workloads
    with pytest.raises(ValueError, match=r"workload 'ddp_mlp' is already registered \(built in\)"):
        register_workload(MLPConfig(name="ddp_mlp"))


@pytest.mark.parametrize("bad, message", [
    (42, r"42 \(int\) is not a workload config"),
    (MLPConfig, "is not a workload config"),
    (MLPConfig(name=""), "needs a non-empty str name"),
    (type("NoTiny", (), {"name": "no_tiny", "build": lambda self, device, seed=0: None,
                         "full_size": lambda self: self})(),
     r"workload 'no_tiny' \(NoTiny\) lacks the method\(s\) tiny"),
])
def test_register_workload_rejects_what_is_not_a_workload_config(bad, message):
    with pytest.raises(ValueError, match=message):
        register_workload(bad)
    assert "no_tiny" not in ALL_WORKLOADS


def test_registered_workloads_parametrise_the_e2e_items(pytester, registered, tmp_path):
    """The plugin parametrises a suite's ``workload`` through the registry, and the
    repository's E2E suite lists every registered workload."""
    from tests.helpers import REPO

    register_workload(USER_MLP)
    registered.append("user_mlp")
    pytester.makepyfile(test_user_e2e="""
        import pytest

        pytestmark = [pytest.mark.e2e, pytest.mark.perfmodel_workloads("user_mlp")]


        def test_e2e(workload, perfmodel_session):
            perfmodel_session.run_e2e(workload)
        """)
    options = ("--collect-only", "-q", "-p", "no:cacheprovider",
               f"--perfmodel-results={tmp_path / 'results'}")
    out = pytester.runpytest_inprocess(*options)
    assert out.ret == 0, out.stdout.str()
    out.stdout.fnmatch_lines(["test_user_e2e.py::test_e2e[[]user_mlp[]]"])
    out = pytester.runpytest_inprocess(*options, str(REPO / "suites" / "test_e2e.py"))
    assert out.ret == 0, out.stdout.str()
    collected = [line for line in out.stdout.lines if "::test_e2e[" in line]
    assert [line.rpartition("[")[2][:-1] for line in collected] == list(WORKLOADS)
    assert collected[-1].endswith("test_e2e[user_mlp]")
