"""The held-out model zoo: every model trains at its tiny size, and the split
into a tuning and a scoring half is the documented, fixed one."""

import math

import pytest

from perfmodel.workloads.zoo import (ZOO_ADDITIONS, ZOO_CONFIGS, ZOO_HALVES, ZOO_SPLIT,
                                     get_zoo_config, split_by_rule, zoo_half)

NAMES = [cfg.name for cfg in ZOO_CONFIGS]

#: The split as made once (docs/zoo.md); a change here moves a model between halves.
PINNED_SPLIT = {
    "zoo_audio_m5": "tuning", "zoo_bert_mlm": "tuning", "zoo_deepfm": "tuning",
    "zoo_gru_classifier": "tuning", "zoo_moe": "tuning", "zoo_t5": "tuning", "zoo_vgg": "tuning",
    "zoo_graphsage": "scoring", "zoo_llama": "scoring", "zoo_lstm_lm": "scoring",
    "zoo_seq2seq_transformer": "scoring", "zoo_two_tower": "scoring", "zoo_unet": "scoring",
    "zoo_vit": "scoring",
}


@pytest.mark.parametrize("name", NAMES)
def test_tiny_model_trains(name):
    pytest.importorskip("torch")
    cfg = get_zoo_config(name).tiny()
    try:
        built = cfg.build("cpu")
    except ImportError as exc:
        if "is not installed" in str(exc):
            pytest.skip(str(exc))
        raise
    assert built.name == f"{name}_tiny" and built.items == cfg.batch and built.model.training
    losses = [built.step() for _ in range(2)]
    assert all(loss.dim() == 0 and math.isfinite(loss.item()) for loss in losses)


def test_the_zoo_is_a_dozen_models_of_five_kinds():
    assert len(NAMES) >= 12 and len(set(NAMES)) == len(NAMES)
    assert len({cfg.kind for cfg in ZOO_CONFIGS}) >= 5
    for cfg in ZOO_CONFIGS:
        tiny, full = cfg.tiny(), cfg.full_size()
        assert (type(tiny), tiny.kind, tiny.name) == (type(cfg), cfg.kind, f"{cfg.name}_tiny")
        assert (type(full), full.kind, full.name) == (type(cfg), cfg.kind, f"{cfg.name}_full")
        assert tiny.batch <= cfg.batch <= full.batch


def test_the_split_is_fixed_and_spans_kinds():
    assert ZOO_SPLIT == PINNED_SPLIT and sum(ZOO_ADDITIONS) == len(ZOO_CONFIGS)
    # the rule depends on the models only, not on their order
    assert split_by_rule(tuple(reversed(ZOO_CONFIGS))) == PINNED_SPLIT
    for half in ZOO_HALVES:
        kinds = {cfg.kind for cfg in ZOO_CONFIGS if zoo_half(cfg.name) == half}
        assert len(kinds) >= 4, (half, kinds)
    for name in NAMES:
        assert zoo_half(name) == zoo_half(name) == zoo_half(f"{name}_tiny") \
            == zoo_half(f"{name}_full") == PINNED_SPLIT[name]
    for unknown in ("mlp_small", "zoo_nope", "zoo_vgg_huge"):
        with pytest.raises(ValueError, match=unknown):
            zoo_half(unknown)
    with pytest.raises(ValueError, match="zoo_nope"):
        get_zoo_config("zoo_nope")
