"""Indexing family (gather, scatter, advanced indexing, sort/topk, nonzero,
masked_select): microbenchmarks and predictor accuracy."""

import pytest

from pytest_perfmodel.suite import test_accuracy, test_microbench  # noqa: F401

pytestmark = pytest.mark.perfmodel_ops(
    "gather", "scatter_add", "scatter", "index", "index_add", "index_put", "topk", "sort",
    "nonzero", "masked_select")
