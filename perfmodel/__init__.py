"""perfmodel: measure deep-learning ops, fit per-op predictors, predict training
iteration time, and gate CI on prediction error.

Submodules are imported on demand so that ``import perfmodel`` stays cheap;
only :func:`perfmodel.region` (torch-free) is imported here.
"""

from perfmodel.trace.region import region

__version__ = "0.1.0"
__all__ = ["region"]
