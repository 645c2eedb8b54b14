"""End-to-end workloads: measured against predicted iteration time, gated on error."""

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.perfmodel_workloads(
    "mlp_small", "dlrm_random", "dlrm_mlperf", "dlrm_ebag", "dlrm_tbe", "cnn_resnet",
    "cnn_mobilenet", "transformer_encoder", "transformer_decoder", "hf_gpt2")]


def test_e2e(workload, perfmodel_session):
    perfmodel_session.run_e2e(workload)


@pytest.mark.e2e
def test_prediction_speed(perfmodel_session):
    """Predicting a 10,000-task graph (the transformer's, repeated) takes under a second."""
    perfmodel_session.time_prediction("transformer_encoder", tasks=10_000, limit_s=1.0)
