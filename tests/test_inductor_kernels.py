"""``fused_kernels = "inductor"``: torch.compile's kernels for torchtitan's Llama block
(elementwise.inductor_terms). What they move is held to Inductor's own count in
tests/test_inductor_bytes.py (needs torch); here, without torch, the switch's plumbing:
its refusals, its sharding, and that it is what layer_costs prices."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.cli import main
from pipesim.errors import PipesimError
from pipesim.planner.elementwise import elementwise_bytes, elementwise_terms
from pipesim.planner.layout import Layout
from pipesim.planner.specs import Attention, Model, Training, load_model
from test_megatron_kernels import test_bad_kernel_names_are_one_line as bad_kernel_names

COMPILED = Training(seq=8192, fused_kernels="inductor", sequence_parallel=False)


def total(rows, col):
    return sum(r[col] for r in rows)


def test_it_is_what_the_layer_prices():
    m, lay = load_model("llama3-8b"), Layout(pp=1, dp=8, micro_batch=2)
    attn, mlp = elementwise_bytes(m, 0, COMPILED, lay)
    rows = elementwise_terms(m, 0, COMPILED, lay)
    assert attn + mlp == pytest.approx(lay.tokens(8192) * 2 * total(rows, 2))
    te = elementwise_bytes(m, 0, replace(COMPILED, fused_kernels="te"), lay)
    assert attn + mlp > sum(te)


def test_tensor_parallel_shares():
    """heads and ffn split over the tensor ranks; with sequence parallelism the norms and
    the residual too, so every row shrinks by tp."""
    m = load_model("llama3-70b")
    one = elementwise_terms(m, 0, COMPILED, Layout(pp=1, dp=1))
    sp = elementwise_terms(m, 0, replace(COMPILED, sequence_parallel=True), Layout(tp=8, pp=1, dp=1))
    for col in (2, 3):
        assert total(sp, col) == pytest.approx(total(one, col) / 8)
    no_sp = elementwise_terms(m, 0, COMPILED, Layout(tp=8, pp=1, dp=1))
    assert total(no_sp, 2) > total(sp, 2)


def test_fp8_takes_torchaos_casts():
    m, lay = load_model("llama3-8b"), Layout(pp=1, dp=8)
    fp8 = replace(COMPILED, precision="fp8", fp8_scaling="tensor", fp8_casts="torchao")
    rows = elementwise_terms(m, 0, fp8, lay)
    assert [r[:2] for r in rows if r[1] == "fp8 casts"] == [("attention", "fp8 casts"), ("mlp", "fp8 casts")]
    bf16 = elementwise_terms(m, 0, COMPILED, lay)
    assert total(rows, 2) > total(bf16, 2)


def test_other_layers_are_refused():
    """Counted for torchtitan's dense Llama block only: an MoE layer, MLA or GELU is refused."""
    gelu = Model("gpt", 1, 1024, 16, 1000, Attention(), (), 4096, activation="gelu", rotary=False)
    for m, layer in ((load_model("deepseek-v3"), 5), (load_model("mixtral-8x22b"), 0), (gelu, 0)):
        with pytest.raises(PipesimError, match='fused_kernels = "inductor" is counted for'):
            elementwise_terms(m, layer, COMPILED, Layout(pp=1, dp=1))


@pytest.mark.parametrize(
    "fields,needle",
    [
        ({"fused_kernels": "compile"}, "\"inductor\" (torch.compile), got 'compile'"),
        ({"fused_kernels": "inductor", "fused_elementwise": False}, "set fused_elementwise = true"),
        ({"fused_kernels": "inductor", "precision": "fp8"}, 'set fp8_casts = "torchao"'),
    ],
)
def test_bad_settings_are_one_line(tmp_path, capsys, fields, needle):
    """As test_megatron_kernels' bad kernel names: load_training and the CLI both refuse."""
    bad_kernel_names(tmp_path, capsys, fields, needle)


def test_a_refused_model_is_one_line(tmp_path, capsys):
    path = tmp_path / "run.toml"
    path.write_text('fused_kernels = "inductor"\n')
    code = main(["plan", "--model", "mixtral-8x22b", "--cluster", "h100", "--gpus", "64", "--training", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and 'use fused_kernels = "te"' in err and err.count("\n") == 1, err


def test_the_assumptions_say_inductor_only_when_on():
    from pipesim.planner.assumptions import assumptions
    from pipesim.planner.results import Plan
    from pipesim.planner.specs import load_cluster

    m, c = load_model("llama3-8b"), load_cluster("h100", 8)
    on = dict(assumptions(Plan(m, c, Training(fused_kernels="inductor"))))["memory-bound kernels"]
    off = dict(assumptions(Plan(m, c, Training())))["memory-bound kernels"]
    assert "Inductor's own scheduler" in on and "complex multiply" in on
    assert "recomputed ops fused into the backward's kernels" in on
    assert "Inductor" not in off


@pytest.mark.parametrize("ac", ["op", "full"])
def test_the_recompute_is_what_the_layer_prices(ac):
    """Under op or full checkpointing a compiled layer's backward adds the fused recompute
    (inductor_recompute_bytes, held to Inductor's count in tests/test_inductor_bytes.py), not its
    forward's element-wise bytes again as hand-fused kernels' does; the rest of the
    recomputation (multiplies, attention) is priced alike."""
    from pipesim.planner.compute import gemms, hbm_rate, mlp_shapes
    from pipesim.planner.elementwise import inductor_recompute_bytes
    from pipesim.planner.layer_costs import layer_costs
    from pipesim.planner.specs import load_cluster

    m, c, lay = load_model("llama3-8b"), load_cluster("h100", 8), Layout(pp=1, dp=8, micro_batch=2)

    def added(t, redone):
        on, off = (layer_costs(m, 0, c, t, lay, rc) for rc in (ac, "none"))
        return on.attn_b + on.mlp_b - off.attn_b - off.mlp_b - sum(redone) / hbm_rate(c, t)

    te = replace(COMPILED, fused_kernels="te")
    redone = inductor_recompute_bytes(m, 0, COMPILED, lay, ac)
    # under full checkpointing the compiled backward also leaves out w2's multiply, the
    # block's last (tests/test_compiled_recompute_multiplies.py counts it in torch's graph)
    w2 = gemms(c, COMPILED, mlp_shapes(m, 0, COMPILED, lay)[-1:])[0] if ac == "full" else 0.0
    assert added(COMPILED, redone) == pytest.approx(added(te, elementwise_bytes(m, 0, te, lay)) - w2, rel=1e-6)
    assert sum(redone) < 0.7 * sum(elementwise_bytes(m, 0, COMPILED, lay))
    # kernels not compiled (hand-fused or eager) run their whole forward's bytes again
    eager = replace(te, fused_elementwise=False)
    assert added(eager, elementwise_bytes(m, 0, eager, lay)) == pytest.approx(
        added(te, elementwise_bytes(m, 0, te, lay)), rel=1e-6
    )
