"""``pipesim plan``: search the layouts and schedules, then write the report (or its JSON),
with the search's progress on stderr."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import fields

from ..costfile import load_cost_file
from ..errors import PipesimError
from ..files import json_text, write_text_atomic
from ..options import schedule_names
from ..schedules import family
from . import calibrate
from .attention_window import chunked_past_one
from .candidates import Pins
from .naming import layout_text
from .pipeline_layout import is_layout, stage_count
from .rank_fit import least_over
from .search import closest_miss, search, without_twins
from .spec_args import specs_from
from .specs import (
    model_published,
)


def cmd_plan(args: argparse.Namespace) -> int:
    from . import report
    from .plan_stages import pick

    model, cluster, training = specs_from(args)
    schedules = _names(args.schedules, "--schedules") if args.schedules else None
    compare = None
    if args.compare:
        pair = _names(args.compare, "--compare")
        if len(pair) != 2:
            raise PipesimError(f"--compare takes two schedules, like 1f1b,dualpipe; got {args.compare!r}")
        compare = (pair[0], pair[1])
        schedules = sorted(set(schedules or []) | set(pair)) if schedules else list(pair)
    out = None if args.output == "-" else args.output  # -: the report on stdout
    if out and not out.endswith((".md", ".json")):
        raise PipesimError(f"--output must end in .md or .json, got {out!r}")
    if out and args.json and out.endswith(".md"):  # the file's name says Markdown: JSON in it would be a surprise
        raise PipesimError(f"--json writes JSON, but --output {out!r} names a Markdown file: give a .json name or drop --json")
    if args.layout > args.top:
        # the search keeps the --top fastest in order and drops what provably cannot join
        # them (search.py's bound), so a plan past them has no exact place in the ranking
        raise PipesimError(
            f"--layout {args.layout} is past the {args.top} plans --top ranks, and past them the search keeps no exact "
            f"order: give --top {args.layout} or more, or a --layout from 1 to {args.top}"
        )
    calibration = _calibration(args, model, cluster, training)
    fitted = calibration.text(cluster, training) if calibration else None
    if calibration:
        cluster, training = calibrate.scaled(cluster, training, calibration.compute, calibration.links)
    pins = Pins(**{f.name: getattr(args, "pin_" + f.name) for f in fields(Pins)})
    _layout_fits_gpus(training.stage_split, cluster.gpus, pins.pp)
    sizes = [pins.micro_batch] if pins.micro_batch else training.micro_batch_sizes
    if not any(training.global_batch % mb == 0 for mb in sizes):
        # every replica's share of the batch is whole micro-batches, so no layout at all can
        # hold: say which setting, before the search blames the GPUs or the batch alone
        given = (
            f"--micro-batch-size {pins.micro_batch} does not divide"
            if pins.micro_batch
            else f"none of micro_batch_sizes {list(sizes)} divides"
        )
        fits = [d for d in range(1, 9) if training.global_batch % d == 0]
        raise PipesimError(
            f"{given} the global batch of {training.global_batch} sequences; give a size that does "
            f"({', '.join(map(str, fits))}, ...) or another --global-batch"
        )
    plan = search(model, cluster, training, schedules, ProgressLine(sys.stderr), keep=args.top, pins=pins)
    plan.model_published = model_published(args.model)
    if schedules is not None:  # the advice names the flag that left a family out, not --schedules alone
        plan.named = tuple(schedules)
        plan.named_by = " and ".join(f for f, given in (("--schedules", args.schedules), ("--compare", args.compare)) if given)
    notes = report.Notes(
        calibration=fitted,
        uncertainty=calibrate.uncertainty(model, cluster, training, plan.best) if plan.best and not calibration else None,
    )
    as_json = args.json or (out or "").endswith(".json")
    if plan.best is None and least_over(plan, plan.rejected) is None:  # no candidate was refused for memory
        raise PipesimError(
            f"no layout of {model.name} on {cluster.name} can run among {plan.considered}, none for want of memory: "
            f"{closest_miss(plan)}"
        )
    if plan.best is None:  # a failed search is an answer the user must act on, not a report
        raise PipesimError(
            f"nothing fits {model.name} on {cluster.name} ({cluster.hbm_gb:.3g} GB per GPU) among {plan.considered} layouts; "
            f"{closest_miss(plan)}; {_remedy(plan)}"
        )
    pick(plan, args.layout)  # a --layout beyond the ranking: one line, nothing written
    text = (
        json_text(report.to_dict(plan, compare, notes, args.layout))
        if as_json
        else report.markdown(plan, compare, notes, args.layout)
    )
    if out:
        write_text_atomic(out, text)
        summary = _summary(plan.best, plan)
        if args.layout != 1:  # the file says how to run another plan than the best: name it too
            summary += f"; how to run plan #{args.layout}: {_summary(pick(plan, args.layout), plan)}"
        print(f"wrote {out}: {summary}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _remedy(plan) -> str:
    """What would make something fit. Where even the nearest candidate's parameters,
    gradients and optimizer states exceed the whole card (Mixtral 8x7B's 46.7B parameters
    on 8 H100s: 18 bytes each is 840 GB), a smaller batch or sequence frees nothing, so it
    is not offered."""
    least = least_over(plan, plan.rejected)
    # against the whole card, not the rank's usable memory: that is less the loss's and a
    # recomputed layer's transients, which a shorter sequence does shrink
    if least is not None and (least[0].static_gb or 0.0) > plan.cluster.hbm_gb:
        return (
            "add GPUs (--gpus) or use a larger-memory GPU (parameters, gradients and optimizer states alone are over, "
            "so a smaller global batch or sequence would not help)"
        )
    if why := chunked_past_one(plan.model, plan.training):
        # every cp > 1 was refused (layout.cp_problem), so nothing split the sequence's
        # activations: on Llama 4 Scout at 1M tokens neither 2048 H100s nor a global batch of
        # 16 fit, while a shorter sequence (512K on 256) or a larger card (H200) did
        return (
            f"context parallelism, which would split each sequence's activations, was left out: {why}; "
            f"give a shorter --seq or use a larger-memory GPU"
        )
    return "add GPUs (--gpus), use a larger-memory GPU, or lower the global batch or sequence length"


def _calibration(args, model, cluster, training):
    """The fit ``--calibrate`` or ``--measured-step`` asks for, on ``--measured-on``."""
    if not (args.calibrate or args.measured_step is not None):
        if args.measured_on:
            raise PipesimError("--measured-on names the layout of a measurement: give --calibrate or --measured-step with it")
        return None
    if args.calibrate and args.measured_step is not None:
        raise PipesimError("give --calibrate or --measured-step, not both")
    if not args.measured_on:
        raise PipesimError("calibration needs the layout it was measured on: add --measured-on, e.g. pp16,dp128,ep64,dualpipe")
    lay = calibrate.parse_layout(args.measured_on)
    if args.calibrate:
        costs, _ = load_cost_file(args.calibrate)
        return calibrate.from_components(model, cluster, training, lay, costs, args.calibrate)
    return calibrate.from_step(model, cluster, training, lay, args.measured_step)


def _layout_fits_gpus(stage_split: str, gpus: int, pp: int | None) -> None:
    """A Megatron layout string names the stages; they run on pp ranks, one each or (an
    interleaved, V or dual placement, pp > 1) several, so pp divides the stage count and
    the GPUs. Where no pp does, say so before the search, whose nearest miss would be some
    pp1 candidate refused for its stage count."""
    if not is_layout(stage_split):
        return
    n = stage_count(stage_split)
    ranks = [d for d in range(1, n + 1) if n % d == 0 and (d > 1 or n == 1) and gpus % d == 0 and pp in (None, d)]
    if not ranks:
        over = [d for d in range(2, n + 1) if n % d == 0] or [1]
        raise PipesimError(
            f"stage_split {stage_split!r} names {n} stages, which run on pp ranks dividing {n} ("
            + ", ".join(map(str, over))
            + (f"; --pp {pp}" if pp else "")
            + f"), but no such pp divides the {gpus} GPUs: give --gpus a multiple of one of them, or a layout of "
            "as many stages as a pp that divides them"
        )


def _summary(r, plan) -> str:
    return f"{r.candidate.label} on {layout_text(r, plan)}: {r.step_time:.2f} s per step"


def _names(text: str, flag: str) -> list[str]:
    # the registry's spelling (PyTorch's names and any case are accepted); unknown names:
    # one clear line. Read as compare reads --schedules: "," named nothing and the plan
    # searched every schedule; 1f1b,1F1B compared 1f1b with itself
    return [family(n).name for n in schedule_names(text, flag)]


#: seconds between progress lines
PROGRESS_EVERY = 2.0


class ProgressLine:
    """The search's progress on stderr every few seconds: one line rewritten in place on
    a terminal, plain lines otherwise (logs, CI), so a long search never looks hung."""

    def __init__(self, stream, every: float | None = None):
        self.stream = stream
        self.every = PROGRESS_EVERY if every is None else every
        self.tty = stream.isatty()
        self.start = self.last = time.monotonic()
        self.shown = False
        self.width = 0

    def __call__(self, done: int, total: int, plan) -> None:
        now = time.monotonic()
        final = done >= total
        # quiet for a search that answers at once; once shown, the last line says it ended
        if (final and not self.shown) or (not final and now - self.last < self.every):
            return
        self.last, self.shown = now, True
        # counted as the plan keeps them: a twin without recomputation that a selective one
        # matches in step and memory is dropped at the end (search.without_twins), and the
        # running count said 64 where the last line said 58 (llama3-8b, h100, 16 GPUs)
        kept = without_twins(plan.results)
        best = plan.best if final else min(plan.results, key=lambda r: r.step_time, default=None)
        line = (
            f"pipesim plan: {'searched' if final else 'searching'} {plan.considered} candidates, "
            f"{len(kept)} simulated that fit, {plan.skipped} skipped by bound"
            + (f", best {best.step_time:.2f} s per step ({best.candidate.label}, {layout_text(best, plan)})" if best else "")
            + f"; {now - self.start:.0f} s"
        )
        if self.tty:
            self.stream.write("\r" + line.ljust(self.width) + ("\n" if final else ""))
            self.width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
