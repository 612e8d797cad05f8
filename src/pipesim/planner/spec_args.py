"""The model, cluster and training arguments ``pipesim plan`` and ``pipesim memory`` share,
and the model, cluster and training they load."""

from __future__ import annotations

import argparse
from dataclasses import replace

from ..errors import PipesimError
from ..options import number, positive_int, whole_number
from .specs import (
    BOUNDS,
    CP_COMMS,
    TP_OVERLAPS,
    load_cluster,
    load_model,
    load_training,
    model_training,
    preset_names,
)


def add_specs(c: argparse.ArgumentParser, cluster_default: str | None = None, timed: bool = True) -> None:
    """The shared arguments; ``timed`` False leaves out those that set only a time or a
    cost (``--tokens``, the run's GPU-hours; ``--tp-overlap``, which collectives hide),
    which ``pipesim memory`` prints neither of and would take and ignore."""
    c.add_argument(
        "--model",
        required=True,
        help=f"a model preset ({', '.join(preset_names('model'))}), a TOML file or a HuggingFace config.json (or its folder)",
    )
    # the presets as shipped, so that a new one (gb200-nvl72, gb300-nvl72) is offered where it is asked for
    clusters = ", ".join(preset_names("cluster"))
    if cluster_default:
        c.add_argument(
            "--cluster", default=cluster_default, help=f"a cluster preset ({clusters}) or TOML file (default {cluster_default})"
        )
    else:
        c.add_argument("--cluster", required=True, help=f"a cluster preset ({clusters}) or TOML file")
    c.add_argument("--gpus", type=positive_int, help="resize the cluster to this many GPUs")
    g = c.add_argument_group("training (default: the model preset's [training], else pipesim's defaults)")
    g.add_argument("--training", metavar="FILE.toml", help="training spec file")
    # --seq and --tokens take what a training file takes (specs.BOUNDS), so that neither
    # refuses what the other runs
    g.add_argument("--seq", type=whole_number(1, BOUNDS["seq"][1]), help="tokens per sequence (pipesim's default 4096)")
    g.add_argument("--global-batch", type=positive_int, help="sequences per step (pipesim's default 1024)")
    g.add_argument("--precision", choices=("bf16", "fp8"), help="the multiplies' precision (pipesim's default bf16)")
    g.add_argument("--zero", type=whole_number(0, 3), choices=(0, 1, 2, 3), help="ZeRO stage (pipesim's default 1)")
    g.add_argument(
        "--recompute",
        choices=("none", "selective", "full", "auto"),
        help="activation recomputation (pipesim's default auto: plan searches it, memory takes selective; "
        "a training file also takes op and every-N)",
    )
    if timed:
        g.add_argument(
            "--tokens",
            type=number(lambda v: 0 < v <= BOUNDS["tokens"][1], f"a number > 0 and <= {BOUNDS['tokens'][1]:g}"),
            help="tokens of the whole run, for its GPU-hours (pipesim's default 1e12)",
        )
    g.add_argument("--cp-comm", choices=CP_COMMS, help="context parallelism's key/value exchange (default p2p)")
    if timed:
        g.add_argument(
            "--tp-overlap",
            choices=TP_OVERLAPS,
            help="which tensor-parallel collectives run beside a multiply: none, the backward's (Megatron-LM's default), "
            "all (--tp-comm-overlap, AsyncTP; pipesim's default) or micro_pipeline (AsyncTP as torch.compile's "
            "micro-pipeline pass runs it: the backward's input-gradient reduce-scatters exposed)",
        )
    g.add_argument(
        "--stage-split",
        type=stage_split,
        metavar="RULE|LAYOUT",
        help="layers per pipeline stage: balanced (pipesim's default: the busiest rank carries the least), even "
        "(layers / stages each, Megatron-Core's default), or a Megatron --pipeline-model-parallel-layout string "
        "such as 'Et|(tt|)*30mL' (then only layouts with that many stages are considered)",
    )


def stage_split(text: str) -> str:
    """--stage-split, checked as a training file's stage_split is, but named as the flag:
    checked with the rest of the training, a bad value was blamed on --training's file
    ("t.toml: stage_split must be ...") where the file held a good one."""
    try:
        load_training(None, stage_split=text)  # pipesim's defaults, which pass, and this split
    except PipesimError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("training: ")) from None
    return text


def specs_from(args: argparse.Namespace):
    model = load_model(args.model)
    cluster = load_cluster(args.cluster, args.gpus)
    base = model_training(args.model)
    training = load_training(
        args.training,
        base=base,
        seq=args.seq,
        global_batch=args.global_batch,
        precision=args.precision,
        zero=args.zero,
        recompute=args.recompute,
        tokens=getattr(args, "tokens", None),
        cp_comm=args.cp_comm,
        tp_overlap=getattr(args, "tp_overlap", None),
        stage_split=args.stage_split,
    )
    if training.comm_sms >= cluster.sms:  # the compute kernels would get no SMs
        raise PipesimError(
            f"{args.cluster}: sms = {cluster.sms} leaves none for compute beside the training's comm_sms = {training.comm_sms}; "
            f"give sms from {training.comm_sms + 1} up (or a training file with a smaller comm_sms)"
        )
    if training.precision == "fp8" and not cluster.fp8_tflops:
        training = without_fp8(args, cluster, base, training)
    return model, cluster, training


def without_fp8(args: argparse.Namespace, cluster, base: dict, training):
    """FP8 on a GPU without it (A100: fp8_tflops = 0). Its multiplies ran at BF16 while the
    FP8 casts, FP8-saved activations and one-byte dispatch were priced, a run no framework
    makes (Transformer Engine's FP8 needs Hopper or later). Asked for by --precision or a
    training file, it is refused; carried in by a model preset's [training] (DeepSeek-V3's
    fp8 on a100), the plan is of the BF16 run, and says so."""
    asked, file = getattr(args, "precision", None), getattr(args, "training", None)  # compare takes neither
    from_file = bool(file) and load_training(file, base=None).precision == "fp8"
    if asked == "fp8" or from_file or base.get("precision") != "fp8":
        where = "--precision fp8" if asked == "fp8" else f'{file}: precision = "fp8"'
        raise PipesimError(f"{where}, but {cluster.gpu} has no FP8 (fp8_tflops = 0 in {args.cluster}): give bf16")
    # said once the command has succeeded (cli.main): a refusal stays one line
    vars(args).setdefault("notes", []).append(
        f"pipesim: note: {args.model}'s [training] says precision fp8, but {cluster.gpu} has no FP8 "
        f"(fp8_tflops = 0 in {args.cluster}): priced as bf16"
    )
    return replace(training, precision="bf16")
