"""One layer's component times: what ``LayerCosts`` holds, and the presets.

A layer's forward is attention -> all-to-all dispatch -> MLP -> all-to-all combine; its
backward runs the other way, each compute part split into the input gradient (B) and the
weight gradient (W). ``streams`` turns these times into tasks on two streams;
``components`` prices a schedule's items from them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from .inputs import MAX_VALUE, number


@dataclass(frozen=True)
class LayerCosts:
    """Times of one layer's parts for one micro-batch, on a whole GPU."""

    attn_f: float = 1.0
    mlp_f: float = 1.0
    dispatch_f: float = 0.0
    combine_f: float = 0.0
    attn_b: float | None = None  # default: attn_f
    attn_w: float | None = None  # default: attn_f
    mlp_b: float | None = None  # default: mlp_f
    mlp_w: float | None = None  # default: mlp_f
    dispatch_b: float | None = None  # default: dispatch_f (same bytes, other direction)
    combine_b: float | None = None  # default: combine_f

    def __post_init__(self) -> None:
        defaults = {
            "attn_b": self.attn_f,
            "attn_w": self.attn_f,
            "mlp_b": self.mlp_f,
            "mlp_w": self.mlp_f,
            "dispatch_b": self.dispatch_f,
            "combine_b": self.combine_f,
        }
        for name, v in defaults.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, v)
        for f in fields(self):  # finite and at most MAX_VALUE, as a flag's: inf or 1e308 made inf times
            number(getattr(self, f.name), f"component time {f.name.replace('_', '-')}", 0, MAX_VALUE)

    @property
    def forward_compute(self) -> float:
        return self.attn_f + self.mlp_f

    @property
    def forward_comm(self) -> float:
        return self.dispatch_f + self.combine_f

    @property
    def backward_compute(self) -> float:
        return self.attn_b + self.mlp_b

    @property
    def weight_compute(self) -> float:
        return self.attn_w + self.mlp_w

    @property
    def backward_comm(self) -> float:
        return self.dispatch_b + self.combine_b

    def scaled(self, k: float) -> LayerCosts:
        """Every part times ``k`` (half a micro-batch: 0.5; a chunk of k times the layers: k)."""
        return LayerCosts(**{f.name: getattr(self, f.name) * k for f in fields(self)})


#: Presets. ``ep-1to1``: DeepSeek-V3's regime, where expert-parallel all-to-all takes as
#: long as the computation: in each direction a layer's communication equals its
#: computation (forward 2 + 2, backward with weight gradients 4 + 4).
PRESETS: dict[str, LayerCosts] = {
    "ep-1to1": LayerCosts(attn_f=1, mlp_f=1, dispatch_f=1, combine_f=1, dispatch_b=2, combine_b=2),
}
