"""The model a real ``pipesim run`` computes: the tiny transformer, the MoE one, or the
user's own (``--model MODULE:NAME``, a stage model or a list of layers), chosen from the
flags and refused in one line when it cannot be had. torch is imported in the
functions that build a model, so that the parser can take the flags' types from here."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from ..errors import PipesimError
from ..options import positive_int
from .capacity import MAX_BLOCKS


def even_int(text: str) -> int:
    v = positive_int(text)
    if v % 2:
        raise argparse.ArgumentTypeError(f"expected an even width (the tiny model has 2 heads), got {v}")
    return v


def _refuse_slow_build(args, experts: int | None) -> None:
    """The models' own bound (``capacity.MAX_BLOCKS``, which their constructors hold too),
    worded for the flags that set it."""
    blocks = args.layers * (experts or 1)
    if blocks <= MAX_BLOCKS:
        return
    if experts is None:
        raise PipesimError(
            f"--layers {args.layers} builds {blocks:,} blocks on every stage, above the {MAX_BLOCKS:,} pipesim's tiny "
            "model takes (each about 1 ms to build, and every op runs them all: minutes with no output): lower --layers"
        )
    given = f"--experts {experts}" + (f" and --layers {args.layers} build" if args.layers > 1 else " builds")
    raise PipesimError(
        f"{given} {blocks:,} experts on every stage, above the {MAX_BLOCKS:,} pipesim's MoE model takes "
        "(each about 0.5 ms to build, and every op loops over them: minutes with no output): lower --experts"
        + (" or --layers" if args.layers > 1 else "")
    )


def model_of(args):
    """The model the flags name; a PipesimError for one that cannot be had."""
    from .model import TinyTransformer

    if args.model == "moe":
        from .moe import MoETransformer

        experts = args.experts or 4
        typed = getattr(args, "argv", [])
        top_k_given = any(a == "--top-k" or a.startswith("--top-k=") for a in typed)
        if args.top_k > experts and not top_k_given:  # was blamed on --top-k, which the user had not given
            raise PipesimError(
                f"--experts {experts} is fewer than the experts each token goes to (--top-k, default "
                f"{args.top_k}): add --top-k {experts} or give more experts"
            )
        _refuse_slow_build(args, experts)
        return MoETransformer(dim=args.dim, layers_per_stage=args.layers, experts=experts, top_k=args.top_k, batch=2 * args.ep)
    if args.experts is not None or args.top_k != 2:
        flag = "--experts" if args.experts is not None else "--top-k"
        raise PipesimError(f"{flag} sets the experts of --model moe; --model {args.model} has none: drop it or use --model moe")
    if args.model in (None, "tiny"):
        _refuse_slow_build(args, None)
        return TinyTransformer(dim=args.dim, layers_per_stage=args.layers)
    if ":" not in args.model:
        raise PipesimError(
            f"--model must be 'tiny', 'moe' or MODULE:NAME (a stage model or an nn.Sequential), got {args.model!r}"
        )
    return _user_model(args)


def _user_model(args):
    from torch import nn

    from .model import Sequential

    mod_name, attr = args.model.split(":", 1)
    if not mod_name or not attr:  # ':X' failed as "importing  failed: Empty module name"
        raise PipesimError(
            f"--model {args.model!r} lacks its {'module' if not mod_name else 'name'}: give MODULE:NAME, e.g. mymodel:layers"
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like python -m: modules next to you are found
    try:
        module = importlib.import_module(mod_name)
    except (Exception, SystemExit) as e:  # whatever the module raises while it loads: one line, naming it
        # (a sys.exit at import ended pipesim with the module's status and no word)
        raise PipesimError(f"--model {args.model}: importing {mod_name} failed: {_first_line(e)}") from None
    if not hasattr(module, attr):
        raise PipesimError(f"--model {args.model}: module {mod_name} has no {attr!r}")
    obj = getattr(module, attr)
    if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "build") and not isinstance(obj, nn.Module)):
        try:
            obj = obj()
        except (Exception, SystemExit) as e:
            raise PipesimError(f"--model {args.model}: calling {attr}() failed: {_first_line(e)}") from None
    if all(hasattr(obj, m) for m in ("build", "boundary", "microbatch", "loss")):
        if args.input_shape is not None:  # a stage model makes its own micro-batches
            raise PipesimError(
                f"--model {args.model} is a stage model, whose microbatch() makes its input: drop --input-shape "
                "(it is for a list of layers)"
            )
        return obj
    layers = list(obj) if isinstance(obj, (nn.Sequential, nn.ModuleList, list, tuple)) else None
    if layers == []:  # was "is a Sequential, not a model", of what is one
        raise PipesimError(f"--model {args.model} is an empty {type(obj).__name__}: give it the layers to cut into stages")
    if not layers or not all(isinstance(x, nn.Module) for x in layers):
        raise PipesimError(
            f"--model {args.model} is {_a(type(obj).__name__)}, not a model: give a stage model (build, boundary, "
            "microbatch, loss) or an nn.Sequential of layers"
        )
    if args.input_shape is None:
        raise PipesimError(f"--model {args.model} is a list of layers: give --input-shape, e.g. --input-shape 4,16")
    return Sequential(obj, args.input_shape)


def _a(noun: str) -> str:
    """'an int', 'a list': the message said 'a int'."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def _first_line(e: BaseException) -> str:
    if isinstance(e, SystemExit):
        return f"it called sys.exit({e.code!r})"
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def input_shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated sizes like 4,16, got {text!r}") from None
    if not dims or any(d < 1 for d in dims):
        raise argparse.ArgumentTypeError(f"sizes must be >= 1, got {text!r}")
    return dims


# the flags that shape a real run's model, and their defaults (add_commands gives them)
MODEL_DEFAULTS = {
    "model": "tiny",
    "layers": 1,
    "dim": 16,
    "input_shape": None,
    "experts": None,
    "top_k": 2,
    "serial_pairs": False,
}
