"""Ops registered from outside perfmodel (``perfmodel.ops`` entry points of the
installed packages, ``perfmodel.register_op`` calls before collection):
microbenchmarks and predictor accuracy, as for the built-in families.
Collects nothing when there are none."""

import pytest

from perfmodel.ops import external_ops

EXTERNAL = external_ops()

if EXTERNAL:
    from pytest_perfmodel.suite import test_accuracy, test_microbench  # noqa: F401

    pytestmark = pytest.mark.perfmodel_ops(*EXTERNAL)
