"""A plan you can run: the stage split, torchtitan's settings and Megatron-LM's flags.

For one result of the search (the recommendation, or a runner-up by its row number) this
says which layers, the embedding, the output head and the multi-token-prediction (MTP)
modules sit on which stage and rank (the split the plan simulated), and
how to ask torchtitan and Megatron-LM for the same layout and schedule, or that they
cannot run it.

The setting names were read from the trainers' sources as stored here (check them
again against the version you run):
- torchtitan, pytorch/torchtitan at b5bcd76 (2026-08-21): ``ParallelismConfig`` and
  ``TrainingConfig`` in torchtitan/config/configs.py, set as ``--parallelism.<key>`` on
  the command line or in a config registry (torchtitan read TOML files until #2386,
  2026-02, and named the micro-batch setting ``pipeline_parallel_microbatch_size``
  until #4121, 2026-08); the stage placement and CSV handling in
  torchtitan/distributed/pipeline_parallel.py; module names from its LLM models
  (``tok_embeddings``, ``layers.N``, ``norm``, ``lm_head``). Its DeepSeek-V3 refuses
  pipeline parallelism with MTP (torchtitan/models/deepseek_v3/MTP.md).
- Megatron-LM, NVIDIA/Megatron-LM at d98e8a6 (2026-08-22): megatron/training/arguments.py
  and the TransformerConfig fields it turns into flags; the layout syntax (E embedding,
  t layer, m MTP, L loss, stages split by |) in
  megatron/core/transformer/pipeline_parallel_layer_layout.py. Its schedules are 1F1B,
  interleaved 1F1B (virtual stages) and combined 1F1B (``--overlap-moe-expert-parallel-comm``,
  which needs virtual stages when pp > 1); it has no GPipe, Zero Bubble, V or DualPipe
  schedule.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache

from ..errors import PipesimError
from ..ir import Op, Placement, Schedule
from ..runtime.torch_export import placing_class, torch_class_of, torchtitan_class
from ..schedules import REGISTRY, build
from .candidates import COST_OPTIONS
from .collectives import a2a_size
from .naming import COMBINED, layout_text
from .results import Plan, Result
from .specs import Model, load_model
from .split import ranges_of
from .stages import component_costs, stage_parts


@dataclass(frozen=True)
class Part:
    """One model stage: what it holds, where it lives, and its time per micro-batch."""

    stage: int
    ranks: tuple[int, ...]  # one per model copy that holds it (two for DualPipe)
    layers: range
    embedding: bool
    head: bool
    mtp: int
    seconds: float  # F + B + W of one micro-batch, compute and communication

    def to_dict(self) -> dict:
        return {
            "stage": self.stage,
            "ranks": list(self.ranks),
            "layers": [self.layers.start, self.layers.stop - 1] if self.layers else [],
            "embedding": self.embedding,
            "head": self.head,
            "mtp": self.mtp,
            "seconds_per_microbatch": self.seconds,
        }


def pick(plan: Plan, n: int = 1) -> Result:
    """The n-th plan of the ranking (1: the recommendation)."""
    if not plan.results:
        raise PipesimError("--layout: nothing fits, so there is no plan to run")
    if not 1 <= n <= len(plan.results):
        raise PipesimError(f"--layout {n}: choose 1 (the recommendation) to {len(plan.results)}, the plans that fit")
    return plan.results[n - 1]


def built_order(r: Result) -> Schedule | None:
    """The result's op order, built again with what the search built it with; None for
    a result made by hand of a family that orders by the candidate's costs (zb-auto)."""
    cand = r.candidate
    opts = r.options
    if opts is None:
        if set(COST_OPTIONS) <= REGISTRY[cand.schedule].options.keys():
            return None
        opts = {"chunks": cand.chunks} if cand.chunks is not None else {}
    return build(cand.schedule, cand.layout.pp, cand.microbatches, **opts)


def placement_of(r: Result) -> Placement:
    cand = r.candidate
    fam = REGISTRY[cand.schedule]
    chunks = cand.chunks or (2 if fam.placement in ("v", "dual") else fam.options.get("chunks", 1))
    return Placement.standard(fam.placement, cand.layout.pp, cand.microbatches, chunks)


def stage_split(plan: Plan, r: Result) -> list[Part]:
    """The model's stages for result ``r`` as the planner split and simulated them
    (``stages.stage_parts``: balanced over what each rank holds, or the same number of
    layers a stage with ``stage_split = "even"``), the embedding on the first stage, the
    output head and MTP modules on the last, each with its F + B + W per micro-batch
    under the same cost model."""
    m, c, t = plan.model, plan.cluster, plan.training
    lay, rc = r.candidate.layout, r.candidate.recompute
    pl = placement_of(r)
    if r.stage_layers is None:  # a result made by hand, not by the search
        parts = stage_parts(m, c, t, lay, pl.stages, rc, pl.held())
    else:
        parts = ranges_of(list(r.stage_layers))
    costs = component_costs(m, c, t, lay, pl.stages, rc, parts)
    holders = [tuple(sorted({route[s][0] for route in pl.routes})) for s in range(pl.stages)]
    out = []
    for s, (rng, ranks) in enumerate(zip(parts, holders)):
        last = s == pl.stages - 1
        seconds = sum(costs.op_time(Op(kind, 0, 0), s) for kind in "FBW")
        out.append(Part(s, ranks, rng, s == 0, last, m.mtp_layers if last else 0, seconds))
    return out


# --------------------------------------------------------------------------------------
# torchtitan


def csv_name(r: Result) -> str:
    c = r.candidate
    chunks = f"-v{c.chunks}" if c.chunks else ""
    return f"{c.schedule}{chunks}-pp{c.layout.pp}-m{c.microbatches}.csv"


def export_command(r: Result) -> str:
    """The ``pipesim export`` that writes this result's order: its builder's options as
    flags, zb-auto's per-stage costs to the last digit (its order depends on them)."""
    c = r.candidate
    opts = r.options if r.options is not None else {"chunks": c.chunks}
    flags = ""
    for key, value in opts.items():
        if value is None:
            continue
        text = ",".join(map(repr, value)) if isinstance(value, tuple) else repr(value)
        flags += f" --{key.replace('_', '-')} {text}"
    return f"pipesim export --schedule {c.schedule}{flags} --pp {c.layout.pp} -m {c.microbatches} -o {csv_name(r)}"


def _toml_value(v) -> str:
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list) and v and isinstance(v[0], list):  # one model part a line
        return "[\n" + "".join(f"  {_toml_value(x)},\n" for x in v) + "]"
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return str(v)


def torchtitan(plan: Plan, r: Result, parts: list[Part]) -> dict:
    """torchtitan's settings for this plan, or why it cannot run it."""
    cand, lay, m, t = r.candidate, r.candidate.layout, plan.model, plan.training
    pl = placement_of(r)
    notes: list[str] = []
    if len(pl.routes) > 1:
        return {
            "runs": False,
            "why": f"{cand.schedule} keeps two copies of the model; torch.distributed.pipelining holds each stage once "
            "(DualPipeV is DualPipe on one copy)",
        }
    order = built_order(r)
    theirs = torch_class_of(order) if order is not None else None  # the PyTorch class that runs it, if any
    exact = torchtitan_class(order, theirs) if theirs else None
    if exact:
        name, csv = exact, None
    else:
        name = placing_class(pl, lay.pp, cand.microbatches)
        csv = csv_name(r)
        if order is None:
            who = f"{cand.schedule}'s order is built from this plan's costs"
        elif theirs:
            who = f"{cand.schedule} is PyTorch's {theirs} on one stage per rank, which torchtitan does not build"
        else:
            who = f"no PyTorch schedule class runs {cand.schedule}'s order"
        notes.append(
            f"{who}: the CSV carries it, and the schedule name {name} only places the stages "
            f"(write the CSV with: {export_command(r)})"
        )
    par: dict = {
        "pipeline_parallel_degree": lay.pp,
        "pipeline_parallel_schedule": name,
    }
    if csv:
        par["pipeline_parallel_schedule_csv"] = csv
    par["num_pp_microbatches"] = cand.microbatches
    if lay.pp > 1:
        par["module_fqns_per_model_part"] = [_fqns(p) for p in parts]
    par["tensor_parallel_degree"] = lay.tp
    if t.zero == 0:
        par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"] = lay.dp, 1
    else:
        par["data_parallel_shard_degree"] = lay.dp
        if t.fsdp_reshard != "default":
            par["fsdp_reshard_after_forward"] = t.fsdp_reshard
        notes.append(f"torchtitan shards over data parallelism with FSDP (ZeRO-3), where the plan assumed ZeRO-{t.zero}")
    if lay.cp > 1:
        par["context_parallel_degree"] = lay.cp
        par["context_parallel_load_balancer"] = "headtail"
        if t.cp_comm != "all_gather":
            notes.append(
                f"torchtitan's context parallelism all-gathers keys and values (PyTorch's context_parallel), where the "
                f"plan assumed cp_comm = {t.cp_comm}: price it with cp_comm = all_gather"
            )
    if m.moe:
        par["expert_parallel_degree"] = lay.ep
        if lay.etp > 1:
            return {"runs": False, "why": f"torchtitan (at b5bcd76) has no expert tensor parallelism; the plan has etp{lay.etp}"}
    if m.mtp_layers:
        notes.append(
            "torchtitan's DeepSeek-V3 refuses pipeline parallelism with MTP enabled (models/deepseek_v3/MTP.md): "
            "train without MTP there, or use Megatron-LM"
        )
    training = {
        "num_tokens_per_microbatch_per_dp_rank": lay.micro_batch * t.seq,
        "num_tokens_per_train_step": t.global_batch * t.seq,
        "max_context_length": t.seq,
    }
    flags = " ".join(f"--parallelism.{k} {v}" for k, v in par.items() if k != "module_fqns_per_model_part")
    return {
        "runs": True,
        "parallelism": par,
        "training": training,
        "python": torchtitan_python(plan, par, training),
        "toml": torchtitan_toml(plan, r, par, lay),
        "toml_versions": TORCHTITAN_TOML_VERSIONS,
        "command_line": flags,
        "notes": notes,
    }


#: the model presets' full configurations in torchtitan (config_registry.py of each model)
TORCHTITAN_BASES = {
    "llama3-8b": ("torchtitan.models.llama3.config_registry", "llama3_8b"),
    "llama3-70b": ("torchtitan.models.llama3.config_registry", "llama3_70b"),
    "llama3-405b": ("torchtitan.models.llama3.config_registry", "llama3_405b"),
    "deepseek-v3": ("torchtitan.models.deepseek_v3.config_registry", "deepseek_v3_671b"),
}

#: which torchtitan versions read the TOML form
TORCHTITAN_TOML_VERSIONS = (
    "torchtitan before its config refactor (#2386, 2026-02-23) read TOML job files (--job.config_file) with these "
    "[parallelism] and [training] names; from #2386 on, a configuration is a Python function returning "
    "Trainer.Config, run with --module and --config"
)


def torchtitan_base(m: Model) -> tuple[str, str]:
    """(module, function) of torchtitan's own full configuration for this model: the
    preset's, matched by shape (a model read from a config.json has its own name), or a
    placeholder to fill in."""
    for preset, where in TORCHTITAN_BASES.items():
        if replace(_preset_model(preset), name=m.name) == m:
            return where
    return "your_configs", "your_base_config"


@cache
def _preset_model(name: str) -> Model:
    return load_model(name)


def torchtitan_python(plan: Plan, par: dict, training: dict) -> str:
    """The current form (torchtitan from #2386): a function returning ``Trainer.Config``,
    here the model's own full configuration with the plan's parallelism and batch."""
    module, base = torchtitan_base(plan.model)
    lines = [
        "# my_plan.py; run: MODULE=my_plan CONFIG=pipesim_plan NGPU=<GPUs a node> ./run_train.sh (one launch a node)",
        "from torchtitan.config import ParallelismConfig",
        f"from {module} import {base}",
        "",
        "",
        "def pipesim_plan():",
        f"    config = {base}()",
        "    config.parallelism = ParallelismConfig(",
    ]
    for k, v in par.items():
        if isinstance(v, list) and v and isinstance(v[0], list):
            lines.append(f"        {k}=[")
            lines += [f"            {x!r}," for x in v]
            lines.append("        ],")
        else:
            lines.append(f"        {k}={v!r},")
    lines.append("    )")
    lines += [f"    config.training.{k} = {v!r}" for k, v in training.items()]
    lines.append("    return config")
    return "\n".join(lines) + "\n"


def torchtitan_toml(plan: Plan, r: Result, par: dict, lay) -> str:
    """The same settings in the TOML job file of torchtitan before #2386, whose names
    differed: sequences per micro-batch (``pipeline_parallel_microbatch_size``) and per
    data-parallel rank (``local_batch_size``) instead of token counts, and the context
    exchange chosen by ``context_parallel_rotate_method``."""
    t = plan.training
    old = {k: v for k, v in par.items() if k not in ("num_pp_microbatches", "context_parallel_load_balancer")}
    old["pipeline_parallel_microbatch_size"] = lay.micro_batch
    if lay.cp > 1:
        old["context_parallel_rotate_method"] = "alltoall" if t.cp_comm == "a2a" else "allgather"
    training = {"local_batch_size": t.global_batch // lay.dp, "global_batch_size": t.global_batch, "seq_len": t.seq}
    toml = ["[parallelism]"] + [f"{k} = {_toml_value(v)}" for k, v in old.items()] + [""]
    toml += ["[training]"] + [f"{k} = {_toml_value(v)}" for k, v in training.items()]
    return "\n".join(toml) + "\n"


def _fqns(p: Part) -> list[str]:
    names = ["tok_embeddings"] if p.embedding else []
    names += [f"layers.{i}" for i in p.layers]
    return names + (["norm", "lm_head"] if p.head else [])


# --------------------------------------------------------------------------------------
# Megatron-LM


def megatron_layout(parts: list[Part]) -> str:
    """``--pipeline-model-parallel-layout``: the stages in model order, split by |."""

    def one(p: Part) -> str:
        n = len(p.layers)
        body = ("E" if p.embedding else "") + ("t" if n == 1 else f"t*{n}" if n else "")
        return body + "m" * p.mtp + ("L" if p.head else "")

    return "|".join(one(p) for p in parts)


def megatron(plan: Plan, r: Result, parts: list[Part]) -> dict:
    """Megatron-LM's flags for this plan, or why it has no equivalent schedule."""
    cand, lay, m, t = r.candidate, r.candidate.layout, plan.model, plan.training
    name = cand.schedule
    pl = placement_of(r)
    if name not in ("1f1b", "interleaved-1f1b", *COMBINED):
        what = {
            "dualpipe": "DualPipe (two model copies, bidirectional); run it with DeepSeek's deepseek-ai/DualPipe",
            "dualpipev": "DualPipeV; PyTorch's ScheduleDualPipeV (torchtitan) runs it",
        }.get(name, name)
        return {"runs": False, "why": f"Megatron-LM has no {what} schedule: it runs 1F1B, interleaved 1F1B and combined 1F1B"}
    group = r.group_size  # Megatron's group where its default of pp refuses M (search.megatron_group)
    if name.startswith("interleaved") and cand.microbatches % lay.pp and group is None:
        return {
            "runs": False,
            "why": f"pipesim's interleaved order for M={cand.microbatches} not a multiple of pp={lay.pp} is PyTorch's "
            "rounds, not Megatron's",
        }
    if name in COMBINED and lay.pp > 1 and pl.chunks < 2:
        return {
            "runs": False,
            "why": "Megatron-LM overlaps the expert all-to-all (combined 1F1B) only with virtual stages when pp > 1: "
            "use interleaved-1f1b-overlap",
        }
    flags = [f"--num-layers {m.layers}", f"--tensor-model-parallel-size {lay.tp}", f"--pipeline-model-parallel-size {lay.pp}"]
    if lay.pp > 1:  # the split, the virtual stages with it (Megatron derives their number)
        flags.append(f'--pipeline-model-parallel-layout "{megatron_layout(parts)}"')
    if lay.tp > 1:
        flags.append("--sequence-parallel")
    if lay.cp > 1:
        flags += [f"--context-parallel-size {lay.cp}", f"--cp-comm-type {t.cp_comm}"]
        if t.cp_comm == "a2a+p2p":
            a = a2a_size(m, plan.cluster, lay)
            flags.append(f"--hierarchical-context-parallel-sizes {a} {lay.cp // a}")
    if m.moe:
        # Megatron's expert tensor parallelism defaults to --tensor-model-parallel-size:
        # say it whenever it differs, as the folding the plan assumed needs
        flags.append(f"--expert-model-parallel-size {lay.ep}")
        if lay.etp != lay.tp:
            flags.append(f"--expert-tensor-parallel-size {lay.etp}")
    if m.mtp_layers:
        flags.append(f"--mtp-num-layers {m.mtp_layers}")
    flags += [f"--micro-batch-size {lay.micro_batch}", f"--global-batch-size {t.global_batch}", f"--seq-length {t.seq}"]
    if t.zero >= 1:
        flags.append("--use-distributed-optimizer")
    if cand.recompute == "selective":
        flags.append("--recompute-granularity selective")
    elif cand.recompute == "full":
        flags += ["--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1"]
    if group is not None:
        flags.append(f"--microbatch-group-size-per-virtual-pipeline-stage {group}")
    notes = []
    if name in COMBINED:
        flags.append("--overlap-moe-expert-parallel-comm")
        if getattr(cand, "delay_wgrad", False):
            flags.append("--delay-wgrad-compute")
        else:
            notes.append("add --delay-wgrad-compute to defer the weight gradients (pipesim's --delay-wgrad)")
    return {"runs": True, "flags": flags, "notes": notes}


# --------------------------------------------------------------------------------------
# the report's section


def recipe(plan: Plan, n: int = 1) -> dict:
    r = pick(plan, n)
    parts = stage_split(plan, r)
    tt = torchtitan(plan, r, parts)
    path = tt.get("parallelism", {}).get("pipeline_parallel_schedule_csv")
    return {
        "layout": n,
        "schedule": r.candidate.label,
        "stages": [p.to_dict() for p in parts],
        "torchtitan": tt,
        "megatron": megatron(plan, r, parts),
        # the order as PyTorch's runtime reads it, when no class of its own runs it
        "schedule_csv": {"path": path, "command": export_command(r)} if path else None,
    }


def markdown(plan: Plan, n: int = 1) -> list[str]:
    """The 'How to run it' section of the report."""
    d = recipe(plan, n)
    r = pick(plan, n)
    which = "the recommendation" if n == 1 else f"plan #{n} of the ranking"
    out = [
        "## How to run it",
        "",
        f"For {which}: {d['schedule']} on {layout_text(r, plan)}, {r.candidate.microbatches} micro-batches, with "
        + (
            "the same number of layers on every stage (stage_split = even), as simulated"
            if plan.training.stage_split == "even"
            else "the stages the plan simulated, their layers balanced over what each rank runs"
        )
        + " (ms: F + B + W of one micro-batch):",
        "",
        "| stage | rank | layers | also holds | ms per micro-batch |",
        "|---|---|---|---|---|",
    ]
    for p in d["stages"]:
        held = [x for x, on in (("embedding", p["embedding"]), ("output head", p["head"])) if on]
        held += [f"{p['mtp']} MTP"] if p["mtp"] else []
        first, last = p["layers"]
        layers = str(first) if first == last else f"{first}-{last}"
        ranks = ", ".join(map(str, p["ranks"]))
        out.append(f"| {p['stage']} | {ranks} | {layers} | {', '.join(held) or '-'} | {p['seconds_per_microbatch'] * 1e3:.1f} |")
    out.append("")
    tt = d["torchtitan"]
    if tt["runs"]:
        out += [
            "torchtitan (a configuration function, its current form):",
            "",
            "```python",
            tt["python"].rstrip(),
            "```",
            "",
            f"The same as a TOML job file ({tt['toml_versions']}):",
            "",
            "```toml",
            tt["toml"].rstrip(),
            "```",
        ]
        out += [f"- {x}" for x in tt["notes"]]
    else:
        out.append(f"torchtitan: cannot run it: {tt['why']}.")
    out.append("")
    mg = d["megatron"]
    if mg["runs"]:
        out += ["Megatron-LM:", "", "```", " \\\n  ".join(mg["flags"]), "```"] + [f"- {x}" for x in mg["notes"]]
    else:
        out.append(f"Megatron-LM: no equivalent. {mg['why']}.")
    out.append("")
    if d["schedule_csv"]:
        out += [f"Schedule CSV: `{d['schedule_csv']['command']}`", ""]
    return out
