"""The public API of ``import perfmodel``: lazy, complete, and strict about unknown names."""

import importlib
import json
import subprocess
import sys

import pytest

import perfmodel

HEAVY = ("torch", "numpy", "sklearn", "scipy")


def _run(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON object, returned."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_import_perfmodel_loads_no_heavy_library():
    out = _run(f"""
import json, sys
loaded = lambda: sorted(m for m in {HEAVY!r} if m in sys.modules)
import perfmodel
after_import = loaded()
with perfmodel.region("data"):  # a region needs no torch
    pass
@perfmodel.region
def step():
    return 1
step()
perfmodel.register_op, perfmodel.OpDef, perfmodel.get_workload("mlp_small")
print(json.dumps({{"import": after_import, "region and registries": loaded()}}))
""")
    assert out == {"import": [], "region and registries": []}


def test_every_public_name_resolves_to_its_definition():
    assert perfmodel.__all__ == sorted(perfmodel._EXPORTS)  # one table, listed once each
    for name in perfmodel.__all__:
        module = importlib.import_module(perfmodel._EXPORTS[name])
        assert getattr(perfmodel, name) is getattr(module, name), name
    assert set(perfmodel.__all__) <= set(dir(perfmodel)) and "__version__" in dir(perfmodel)
    assert {"predict_model", "region", "detect_device", "fit_predictors", "load_baseline",
            "Timer", "register_op", "register_workload", "get_op", "get_workload", "OpDef",
            "OpCase", "DeviceSpec"} <= set(perfmodel.__all__)


def test_region_stays_a_function():
    """``perfmodel.region`` is the function (context manager and decorator), not
    the module :mod:`perfmodel.trace.region`, however it was first reached."""
    import perfmodel.trace.region

    assert callable(perfmodel.region) and perfmodel.region.__module__ == "perfmodel.trace.region"
    with perfmodel.region("x") as r:
        assert r is not None


def test_from_import_works():
    from perfmodel import OpDef, get_op, register_op

    assert isinstance(get_op("linear"), OpDef) and callable(register_op)


def test_an_unknown_attribute_is_an_attribute_error_naming_it():
    with pytest.raises(AttributeError, match="module 'perfmodel' has no attribute 'no_such_api'"):
        perfmodel.no_such_api  # noqa: B018
    assert not hasattr(perfmodel, "OPS")  # registries live in perfmodel.ops / .workloads
    with pytest.raises(ImportError, match="no_such_api"):
        exec("from perfmodel import no_such_api")
