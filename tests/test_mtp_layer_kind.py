"""Which layer an MTP module is built as when the model's last layer is dense. Megatron-LM
(NVIDIA/Megatron-LM at d98e8a6, gpt_builders.py) builds the MTP layer from the last decoder
layer's spec, but where the last stage's block holds no decoder layer (a layout ending
``|mL``) from ``_get_transformer_layer_spec``, whose MLP is MoE whenever the model has
experts (``get_gpt_layer_with_transformer_engine_spec(config.num_moe_experts, ...)``).
Expected values are counted by hand from the model file below."""

from __future__ import annotations

import pytest

from pipesim.planner.footprint import stage_params
from pipesim.planner.layout import Layout
from pipesim.planner.specs import load_cluster, load_model, load_training
from pipesim.planner.stages import component_costs

# layers 1, 3 and 5 MoE; the last (7) dense; one MTP module
MODEL = """
name = "toy-mtp"
layers = 8
hidden = 2048
heads = 16
vocab = 32000
tied_embeddings = false
mtp_layers = 1

[attention]
kind = "gqa"
kv_heads = 8
head_dim = 128

[mlp]
dense_ffn = 8192
moe_layer_freq = [0, 1, 0, 1, 0, 1, 0, 0]

[moe]
experts = 8
expert_ffn = 4096
top_k = 2
"""

#: one MoE layer's routed experts on one of 8 expert ranks: 8 experts x 3 SwiGLU matrices
#: of 2048 x 4096, over ep 8
EXPERTS_PER_RANK = 8 * 3 * 2048 * 4096 / 8


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "toy-mtp.toml"
    path.write_text(MODEL)
    return load_model(str(path))


@pytest.mark.parametrize(
    "last_stage, moe_layers_there",
    [
        (range(4, 8), 1),  # layers 4-7: layer 5 MoE; the MTP layer is layer 7's kind, dense
        (range(8, 8), 1),  # no decoder layer: Megatron's fallback spec, an MoE MTP layer
    ],
)
def test_mtp_expert_parameters_follow_megatrons_spec(model, last_stage, moe_layers_there):
    _, experts = stage_params(model, last_stage, True, False, Layout(pp=2, dp=8, ep=8))
    assert experts == moe_layers_there * EXPERTS_PER_RANK


def test_an_mtp_layer_on_a_stage_without_decoder_layers_dispatches_to_experts(model):
    c, t, lay = load_cluster("h100", 16), load_training(seq=4096, global_batch=64), Layout(pp=2, dp=8, ep=8)
    # the MTP block is the last stage's first op; its combine is the experts' all-to-all back
    # (ep 8 over one node's NVLink), which a dense layer has none of
    empty = component_costs(model, c, t, lay, 2, "full", [range(0, 8), range(8, 8)]).stages[1][0]
    dense = component_costs(model, c, t, lay, 2, "full", [range(0, 7), range(7, 8)]).stages[1][1]
    assert empty.combine_f > 0
    assert dense.combine_f == 0
