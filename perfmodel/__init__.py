"""perfmodel: measure deep-learning ops, fit per-op predictors, predict training
iteration time, and gate CI on prediction error.

The public API below is imported on first use (a module ``__getattr__``), so
``import perfmodel`` loads neither torch nor numpy::

    import perfmodel

    with perfmodel.region("data"):          # name a part of a training step
        batch = next(loader)

    result = perfmodel.predict_model(model, batch, loss_fn, optimizer)  # a MeasuredIteration
    perfmodel.register_op(MyFusedOp())      # or a "perfmodel.ops" entry point
"""

import importlib as _importlib
import typing as _typing

__version__ = "0.1.0"

#: Public name -> the module that defines it.
_EXPORTS = {
    "predict_model": "perfmodel.e2e.single",
    "region": "perfmodel.trace.region",
    "detect_device": "perfmodel.device.probe",
    "DeviceSpec": "perfmodel.device.spec",
    "fit_predictors": "perfmodel.fit.fitting",
    "load_baseline": "perfmodel.gate.baseline",
    "Timer": "perfmodel.measure.timer",
    "OpDef": "perfmodel.ops.base",
    "OpCase": "perfmodel.ops.base",
    "register_op": "perfmodel.ops",
    "get_op": "perfmodel.ops",
    "register_workload": "perfmodel.workloads",
    "get_workload": "perfmodel.workloads",
    "Session": "perfmodel.session",
    "IterationPrediction": "perfmodel.simulate.result",
    "MeasuredIteration": "perfmodel.e2e.result",
}

__all__ = ["DeviceSpec", "IterationPrediction", "MeasuredIteration", "OpCase", "OpDef", "Session",
           "Timer", "detect_device", "fit_predictors", "get_op", "get_workload", "load_baseline",
           "predict_model", "region", "register_op", "register_workload"]

if _typing.TYPE_CHECKING:  # for type checkers and IDEs; at run time __getattr__ imports these
    from perfmodel.session import Session
    from perfmodel.device.probe import detect_device
    from perfmodel.device.spec import DeviceSpec
    from perfmodel.e2e.result import MeasuredIteration
    from perfmodel.e2e.single import predict_model
    from perfmodel.fit.fitting import fit_predictors
    from perfmodel.gate.baseline import load_baseline
    from perfmodel.measure.timer import Timer
    from perfmodel.ops import get_op, register_op
    from perfmodel.ops.base import OpCase, OpDef
    from perfmodel.simulate.result import IterationPrediction
    from perfmodel.trace.region import region
    from perfmodel.workloads import get_workload, register_workload


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'perfmodel' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    """The public API, ``__version__`` and the subpackages imported so far."""
    public = {name for name in globals() if not name.startswith("_")}
    return sorted(public | set(__all__) | {"__version__"})
