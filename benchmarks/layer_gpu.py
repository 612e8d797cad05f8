"""A whole Llama layer as torchtitan runs it, timed on this machine's GPU, beside pipesim's
price of that layer.

    python benchmarks/layer_gpu.py                 # needs PyTorch and a CUDA GPU
    python benchmarks/layer_gpu.py --preset h100   # the cluster preset to price it on

The layer is written the way torchtitan's Llama 3 model writes it, eager, bf16, on one GPU
(no tensor parallelism): torchtitan 9dec370's own eager RMSNorm (models/norms.py: the fp32
chain, not ``nn.RMSNorm``, which recent PyTorch runs as one fused kernel), bias-free q, k, v
and output projections, rotary embeddings through complex multiplication, the key/value
heads copied out to the query heads (``repeat_kv``), PyTorch's causal
``scaled_dot_product_attention`` on equal heads, the residual adds, and a
SwiGLU MLP (``silu(w1 x) * w3 x`` then ``w2``). It is timed forward and forward plus
backward (the backward is their difference) with CUDA events after warm-up, for Llama 3 8B
and 70B shapes at 8,192 tokens, one and two sequences. Beside it: pipesim's
``layer_costs`` for the same layer on the preset (default h200) with the training file
torchtitan's rows use (eager element-wise kernels, FlashAttention-2's block order, its
0.37 attention share), forward ``attn_f + mlp_f`` and backward the rest; then, for one
sequence, each forward kernel timed alone on the layer's tensors beside pipesim's part
(projections, attention core, MLP multiplies, each block's element-wise kernels). Measured
and predicted in the same run; nothing is fitted. Without PyTorch or a CUDA GPU it says so in
one line.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_timing import cuda_torch, preset_args, seconds  # noqa: E402

from pipesim.planner.layer_costs import layer_costs  # noqa: E402
from pipesim.planner.layout import Layout  # noqa: E402
from pipesim.planner.specs import load_cluster, load_model, load_training  # noqa: E402

#: torchtitan's rows' training set-up (benchmarks/data/published_runs.toml), one layer alone
TITAN = {"attention_block_order": "launch", "attention_efficiency": 0.37, "fused_elementwise": False}
CASES = (("llama3-8b", 8192, 1), ("llama3-8b", 8192, 2), ("llama3-70b", 8192, 1), ("llama3-70b", 8192, 2))


def titan_rms_norm(torch, h: int, dev: dict):
    """torchtitan 9dec370's RMSNorm (models/norms.py ``RMSNorm``, its default norm_type):
    upcast, pow, mean, add, rsqrt, multiply, downcast, the weight's multiply, each an eager
    kernel, as pipesim's eager element-wise pricing counts them."""
    weight = torch.ones(h, **dev, requires_grad=True)

    def norm(x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * weight

    return norm


def repeat_kv(x, n_rep: int):
    """torchtitan 9dec370's repeat_kv (models/llama/model.py): each key/value head copied out
    to its query heads before SDPA, which then runs its equal-heads kernel."""
    b, s, n, d = x.shape
    return x if n_rep == 1 else x.unsqueeze(3).expand(b, s, n, n_rep, d).reshape(b, s, n * n_rep, d)


def llama_layer(torch, h: int, heads: int, kv: int, ffn: int, seq: int, device: str = "cuda"):
    """A torchtitan-style Llama block as a function of its input, with its weights."""
    nn, F = torch.nn, torch.nn.functional
    d, n = h // heads, heads // kv
    dev = {"device": device, "dtype": torch.bfloat16}
    attn_norm, mlp_norm = titan_rms_norm(torch, h, dev), titan_rms_norm(torch, h, dev)
    wq, wk, wv, wo = (nn.Linear(a, b, bias=False, **dev) for a, b in ((h, h), (h, kv * d), (h, kv * d), (h, h)))
    w1, w3, w2 = (nn.Linear(a, b, bias=False, **dev) for a, b in ((h, ffn), (h, ffn), (ffn, h)))
    freqs = 1.0 / (500000.0 ** (torch.arange(0, d, 2, device=device).float() / d))
    freqs_cis = torch.polar(torch.ones(seq, d // 2, device=device), torch.outer(torch.arange(seq, device=device).float(), freqs))

    def rotary(x):  # [b, s, n, d]: torchtitan's apply_rotary_emb
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * freqs_cis.view(1, seq, 1, d // 2)).flatten(3).type_as(x)

    def parts(x):
        """The forward's kernels one by one on the layer's tensors (name, thunk)."""
        b = x.shape[0]
        xn = attn_norm(x)
        q, k, v = wq(xn).view(b, seq, heads, d), wk(xn).view(b, seq, kv, d), wv(xn).view(b, seq, kv, d)
        qt, kt, vt = rotary(q).transpose(1, 2), repeat_kv(rotary(k), n).transpose(1, 2), repeat_kv(v, n).transpose(1, 2)
        o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True).transpose(1, 2).reshape(b, seq, h)
        g = w1(xn)
        return (
            ("norm", "ew_attn", lambda: attn_norm(x)),
            ("q, k, v, out multiplies", "proj", lambda: (wq(xn), wk(xn), wv(xn), wo(o))),
            ("rotary", "ew_attn", lambda: (rotary(q), rotary(k))),
            ("repeat_kv", "ew_attn", lambda: (repeat_kv(k, n), repeat_kv(v, n))),
            ("attention", "core", lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)),
            ("residual add", "ew_attn", lambda: x + o),
            ("norm", "ew_mlp", lambda: mlp_norm(x)),
            ("w1, w3, w2 multiplies", "mlp", lambda: (w1(xn), w3(xn), w2(g))),
            ("silu(w1 x) * w3 x", "ew_mlp", lambda: F.silu(g) * g),
            ("residual add", "ew_mlp", lambda: x + o),
        )

    def block(x):  # [b, s, h]
        b = x.shape[0]
        xn = attn_norm(x)
        q = rotary(wq(xn).view(b, seq, heads, d))
        k = repeat_kv(rotary(wk(xn).view(b, seq, kv, d)), n)
        v = repeat_kv(wv(xn).view(b, seq, kv, d), n)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + wo(o.transpose(1, 2).reshape(b, seq, h))
        xn = mlp_norm(x)
        return x + w2(F.silu(w1(xn)) * w3(xn))

    block.parts = parts
    return block


def main(argv: list[str] | None = None) -> int:
    args = preset_args(__doc__, argv)
    torch = cuda_torch()
    if torch is None:
        return 0
    c = load_cluster(args.preset)
    props = torch.cuda.get_device_properties(0)
    print(
        f"# One Llama layer, eager as torchtitan writes it, on {props.name} (torch {torch.__version__}) beside pipesim on {args.preset} (ms)\n"
    )
    print("| model | tokens | forward measured | pipesim | err | backward measured | pipesim | err |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    errors = []
    for name, seq, mb in CASES:
        m = load_model(name)
        block = llama_layer(torch, m.hidden, m.heads, m.attention.kv_heads or m.heads, m.dense_ffn, seq)
        x = torch.randn(mb, seq, m.hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        grad = torch.randn_like(x)

        def forward(block=block, x=x):
            with torch.no_grad():
                block(x)

        def both(block=block, x=x, grad=grad):
            block(x).backward(grad)

        f = seconds(torch, forward)
        b = seconds(torch, both) - f
        t = load_training(base={"seq": seq, **TITAN})
        lc = layer_costs(m, m.layers // 2, c, t, Layout(pp=1, dp=1, micro_batch=mb), "none")
        pf = lc.forward_compute
        pb = lc.backward_compute + lc.weight_compute
        errors += [pf / f - 1, pb / b - 1]
        print(
            f"| {name} | {mb} x {seq} | {f * 1e3:.2f} | {pf * 1e3:.2f} | {pf / f - 1:+.1%} | {b * 1e3:.2f} | {pb * 1e3:.2f} | {pb / b - 1:+.1%} |"
        )
    mean = sum(errors) / len(errors)
    print(
        f"\n{len(errors)} passes: bias {mean:+.1%}, mean |err| {sum(map(abs, errors)) / len(errors):.1%}, worst {max(errors, key=abs):+.1%}"
    )
    print_parts(torch, c)
    return 0


def print_parts(torch, c) -> None:
    """The forward of one sequence split into its kernels, each timed alone on the layer's
    tensors, beside pipesim's parts: the projections, the attention core, the multiplies of
    the MLP and each block's element-wise kernels."""
    from pipesim.planner.compute import attention_core, attention_gemms, hbm_rate, mlp_gemms
    from pipesim.planner.elementwise import elementwise_bytes

    print("\n| model | part | measured ms | pipesim part | pipesim ms |")
    print("|---|---|---:|---|---:|")
    for name, seq, mb in CASES:
        if mb != 1:
            continue
        m = load_model(name)
        block = llama_layer(torch, m.hidden, m.heads, m.attention.kv_heads or m.heads, m.dense_ffn, seq)
        x = torch.randn(mb, seq, m.hidden, device="cuda", dtype=torch.bfloat16)
        t = load_training(base={"seq": seq, **TITAN})
        lay = Layout(pp=1, dp=1, micro_batch=mb)
        ew_attn, ew_mlp = (b / hbm_rate(c, t) for b in elementwise_bytes(m, m.layers // 2, t, lay))
        priced = {
            "proj": attention_gemms(m, c, t, lay)[0],
            "core": attention_core(m, c, t, lay, 0)[0],
            "mlp": mlp_gemms(m, m.layers // 2, c, t, lay)[0],
            "ew_attn": ew_attn,
            "ew_mlp": ew_mlp,
        }
        measured: dict = {}
        with torch.no_grad():
            for part, group, fn in block.parts(x):
                ms = seconds(torch, fn) * 1e3
                measured[group] = measured.get(group, 0.0) + ms
                print(f"| {name} | {part} | {ms:.3f} | {group} | |")
        for group, sec in priced.items():
            print(f"| {name} | all of {group} | {measured[group]:.3f} | {group} | {sec * 1e3:.3f} |")


if __name__ == "__main__":
    sys.exit(main())
