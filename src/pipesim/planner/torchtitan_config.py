"""torchtitan's settings for a plan (``ParallelismConfig`` and the training batch), in its
current form, a Python function returning ``Trainer.Config``, and in the TOML job file it
read before, or why it cannot run the plan; and the ``pipesim export`` that writes the
schedule CSV where no PyTorch class runs the plan's order.

The names were read from pytorch/torchtitan at b5bcd76 (2026-08-21; check them again
against the version you run): ``ParallelismConfig`` and ``TrainingConfig`` in
torchtitan/config/configs.py, set as ``--parallelism.<key>`` on the command line or in a
config registry (torchtitan read TOML files until #2386, 2026-02, and named the
micro-batch setting ``pipeline_parallel_microbatch_size`` until #4121, 2026-08); the
stage placement and CSV handling in torchtitan/distributed/pipeline_parallel.py; module
names from its LLM models (``tok_embeddings``, ``layers.N``, ``norm``, ``lm_head``). Its
DeepSeek-V3 refuses context and pipeline parallelism with MTP (torchtitan/models/deepseek_v3/MTP.md).
"""

from __future__ import annotations

from typing import NamedTuple

from ..runtime.torch_export import placing_class, torch_class_of, torchtitan_class
from .naming import every_nth_layer
from .plan_stages import Part, built_order, placement_of
from .results import Plan, Result
from .runnable import COMBINED
from .specs import Model, Training
from .torchtitan_bases import PLACEHOLDER, torchtitan_base
from .torchtitan_sharding import ROTATE_METHODS, context_parallel, data_parallel
from .torchtitan_split import command_line_split
from .torchtitan_trainer import (
    DUALPIPEV_OVERLAP,
    TrainerLines,
    async_tp_on,
    comm_backend,
    dualpipev_overlap,
    trainer_lines,
)


def csv_name(r: Result) -> str:
    c = r.candidate
    chunks = f"-v{c.chunks}" if c.chunks else ""
    return f"{c.schedule}{chunks}-pp{c.layout.pp}-m{c.microbatches}.csv"


def _flag_text(value) -> str:
    """A builder option as the command line reads it: a float to its last digit. A numpy
    float is a float whose repr under numpy 2 is ``np.float64(...)``, which no flag reads;
    the search's costs and room come from arrays as well as from plain arithmetic."""
    return float.__repr__(value) if isinstance(value, float) else repr(value)


def export_command(r: Result) -> str:
    """The ``pipesim export`` that writes this result's order: its builder's options as
    flags, zb-auto's per-stage costs to the last digit (its order depends on them)."""
    c = r.candidate
    opts = r.options if r.options is not None else {"chunks": c.chunks}
    flags = ""
    for key, value in opts.items():
        if value is None:
            continue
        text = ",".join(map(_flag_text, value)) if isinstance(value, tuple) else _flag_text(value)
        flags += f" --{key.replace('_', '-')} {text}"
    return f"pipesim export --schedule {c.schedule}{flags} --pp {c.layout.pp} -m {c.microbatches} -o {csv_name(r)}"


def _toml_value(v) -> str:
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list) and v and isinstance(v[0], list):  # one model part a line
        return "[\n" + "".join(f"  {_toml_value(x)},\n" for x in v) + "]"
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
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
    if lay.pp > 1:
        par = _pipeline(r, parts, notes)
    else:
        # no pipeline: torchtitan ignores its pipeline settings and runs the micro-batches as
        # gradient accumulation (num_tokens_per_train_step over the tokens a step of the data
        # parallel ranks takes), one after another, so no pair of them overlaps
        par = {"pipeline_parallel_degree": 1}
        if cand.schedule in COMBINED:
            notes.append(
                f"without pipeline parallelism torchtitan runs the {cand.microbatches} micro-batches one after another "
                f"(gradient accumulation): {cand.schedule}'s overlap of one micro-batch's forward with another's backward "
                "is not there, so its all-to-all stays exposed"
            )
    par["tensor_parallel_degree"] = lay.tp
    if lay.tp > 1:
        notes += tp_overlap_notes(t)
    dp, said = data_parallel(m, lay, t)
    cp, more = context_parallel(lay, t)
    par.update(dp | cp)
    notes += said + more
    if m.moe:
        par["expert_parallel_degree"] = lay.ep
        if lay.etp > 1 and lay.etp != lay.tp:
            return {
                "runs": False,
                "why": f"torchtitan split experts tp ways or not at all (expert_tensor_parallel_degree = tp or 1, {ETP_VERSIONS}) "
                f"and has no expert tensor parallelism since; the plan has etp{lay.etp} with tp{lay.tp}",
            }
    if m.attention_sinks and lay.cp > 1:
        # torchtitan/models/gpt_oss/README.md at b5bcd76: "TODO: More parallelism support: CP,
        # PP"; Decoder.update_from_config (models/common/decoder.py) raises NotImplementedError
        # for CP with VarlenAttention, gpt-oss's default attn_backend
        return {
            "runs": False,
            "why": "torchtitan's gpt-oss has no context parallelism (its README lists CP as to do, and its default "
            "varlen attention is refused under CP by Decoder.update_from_config)",
        }
    if m.attention_sinks and lay.pp > 1:
        notes.append(
            "torchtitan's gpt-oss lists pipeline parallelism as to do (torchtitan/models/gpt_oss/README.md), though its "
            "model spec passes pipeline_llm: the split below is untried there"
        )
    if m.mtp_layers and (lay.pp > 1 or lay.cp > 1):
        # MTP.md at b5bcd76: "explicitly rejects CP and PP when MTP is enabled"
        refused = " and ".join(x for x, on in (("pipeline", lay.pp > 1), ("context", lay.cp > 1)) if on)
        notes.append(
            f"torchtitan's DeepSeek-V3 refuses {refused} parallelism with MTP enabled (models/deepseek_v3/MTP.md): "
            "train without MTP there, or use Megatron-LM"
        )
    ac = activation_checkpoint(cand.recompute)
    if ac.note:
        notes.append(ac.note)
    overlap, said = dualpipev_overlap(m, lay, cand.schedule, cand.recompute)
    notes += said
    base = torchtitan_base(m)
    extra = trainer_lines(m, lay, t, base[1])
    notes += extra.notes
    training = {
        "num_tokens_per_microbatch_per_dp_rank": lay.micro_batch * t.seq,
        "num_tokens_per_train_step": t.global_batch * t.seq,
        "max_context_length": t.seq,
        **extra.training,
    }
    # the split as the settings torchtitan generates it from: the list itself cannot be given
    split, said = command_line_split(parts, m.layers, lay.pp, len(parts) == lay.pp) if lay.pp > 1 else ({}, None)
    notes += [said] if said else []
    # the batch and sequence too: without them a base configuration's own would run
    flags = " ".join(
        [f"--parallelism.{k} {v}" for k, v in {**par, **split}.items() if k != "module_fqns_per_model_part"]
        + [_flag(f"training.{k}", v) for k, v in training.items()]
        + [_flag(f"compile.{k}", v) for k, v in extra.compile.items()]
    )
    # what only the TOML form's versions run (experts split tp ways; tied embeddings split
    # over stages): no configuration function or command line for it
    expert_tp = bool(m.moe) and lay.ep > 1 and lay.tp > 1  # the TOML's setting decides who holds experts
    now = not_now(m, lay)
    if now and m.tied_embeddings and lay.pp > 1:
        notes.append(TIED_BEFORE)
    return {
        "runs": True,
        "parallelism": par,
        "training": training,
        "activation_checkpoint": {"python": ac.python, "toml": ac.toml},
        "python": None if now else torchtitan_python(plan, base, par, training, ac, extra),
        "python_why": now,
        "toml": torchtitan_toml(plan, r, {**par, **overlap}, lay, ac, lay.etp if expert_tp else None),
        "toml_versions": _toml_versions(m, lay, expert_tp, comm_backend(m, lay, t) == "deepep")
        + (f"; DualPipeV's expert-parallel overlap from {DUALPIPEV_OVERLAP}" if overlap else ""),
        "command_line": None if now else flags,
        "notes": notes,
    }


#: when torchtitan began refusing tied embeddings under pipeline parallelism: #2461
#: (6b081f404, 2026-03-03) in Qwen3's model, then every decoder's (models/common/decoder.py
#: at b5bcd76, Decoder.Config.update_from_config: NotImplementedError "Weight tying is not
#: supported with Pipeline Parallel.")
TIED_PP_FROM = "#2461 (2026-03-03)"

#: what the TOML form's versions did with it: the model ties output.weight to
#: tok_embeddings.weight in __init__ (qwen3/model/model.py at 9810191bb^), and each stage is
#: a deep copy of the whole model with the other stages' modules dropped
#: (distributed/pipeline_parallel.py there), so the first stage's embedding and the last
#: stage's head are two weights that train apart
TIED_BEFORE = (
    "the TOML form's versions ran tied embeddings under pipeline parallelism without refusing them, but each stage "
    "is a copy of the model with the others' modules dropped, so the first stage's embedding and the last stage's "
    "head train as two weights, not one"
)


def not_now(m: Model, lay) -> str | None:
    """Why torchtitan today (its configuration function and command line) cannot run the
    plan where its older TOML form did, or None."""
    if m.moe and lay.etp > 1:
        return f"it has no expert tensor parallelism since #3167 (2026-04-30); the plan splits experts etp{lay.etp} ways"
    if m.tied_embeddings and lay.pp > 1:
        return (
            f"it refuses tied embeddings with pipeline parallelism since {TIED_PP_FROM} (Decoder.Config."
            f'update_from_config: "Weight tying is not supported with Pipeline Parallel."), and {m.name} ties its '
            f"output head to its embedding; plan with --pp 1 for a layout it runs"
        )
    return None


def _pipeline(r: Result, parts: list[Part], notes: list[str]) -> dict:
    """torchtitan's pipeline settings for a plan with pp > 1: the schedule class that runs
    its order, or the CSV that carries it, the micro-batches and the split; notes say why a
    CSV is needed."""
    cand, lay = r.candidate, r.candidate.layout
    pl = placement_of(r)
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
    par["module_fqns_per_model_part"] = [_fqns(p) for p in parts]
    return par


def tp_overlap_notes(t: Training) -> list[str]:
    """How torchtitan runs the tensor-parallel collectives the plan priced
    (``tp_overlap``): DTensor waits for each, AsyncTP (compiled) overlaps them all; no
    setting hides only the backward's."""
    if t.tp_overlap == "all":
        return [
            "the plan overlaps every tensor-parallel collective (tp_overlap = all): the configuration compiles the "
            "model with AsyncTP (config.compile; before torchtitan #4045, 2026-08-12, and so in the TOML form: "
            "parallelism.enable_async_tensor_parallel with compile.enable); without it DTensor waits for each "
            "(price that with tp_overlap = none)"
        ]
    if t.tp_overlap == "micro_pipeline":
        return [
            "the plan overlaps the tensor-parallel collectives torch Inductor's micro-pipeline pass fuses "
            "(tp_overlap = micro_pipeline): AsyncTP, as for tp_overlap = all; the backward's input-gradient "
            "reduce-scatters stay exposed"
        ]
    if t.tp_overlap == "backward":
        return [
            "torchtitan has no backward-only tensor-parallel overlap (tp_overlap = backward): DTensor waits for each "
            "collective (tp_overlap = none), AsyncTP overlaps them all (tp_overlap = all)"
        ]
    return []


#: the output head's module name in torchtitan's models before #2937 (2026-04-27), and so in
#: every version that read TOML job files (its llama3, qwen3, deepseek_v3 model.py at
#: 9810191bb^: ``self.output``; pipeline_parallel.py splits on "norm", "output")
OLD_HEAD = "output"


#: which torchtitan versions read the TOML form
TORCHTITAN_TOML_VERSIONS = (
    "torchtitan before its config refactor (#2386, 2026-02-23) read TOML job files (--job.config_file) with these "
    "[parallelism], [training], [activation_checkpoint] and [compile] names; from #2386 on, a configuration is a Python function returning "
    "Trainer.Config, run with --module and --config"
)


#: when torchtitan had ``expert_tensor_parallel_degree`` (read in its history: added by
#: #1555, 2025-08-13, taking tp or 1; before it experts were split tp ways, with no
#: setting; deprecated by #3167, 2026-04-30, since when experts are not split)
ETP_VERSIONS = "#1555, 2025-08-13, to #3167, 2026-04-30"

#: the TOML form's versions where it sets expert_tensor_parallel_degree
TORCHTITAN_ETP_TOML_VERSIONS = (
    "torchtitan from #1555 (2025-08-13), which added expert_tensor_parallel_degree, until its config refactor "
    "(#2386, 2026-02-23) read TOML job files (--job.config_file) with these names; before #1555 experts were split "
    "tp ways with no setting"
)


#: from when torchtitan's ParallelDims took any expert-parallel degree that divides its
#: mesh (#1660, 2025-12-17, rebuilt it on DeviceMesh unflatten); from dp2ep (#1324,
#: 2025-07-08) until then it asserted that ep covers all of cp, and with experts not
#: split tp ways (etp 1, #1555) all of tp too
EP_ANY_FROM = "#1660 (2025-12-17)"


#: the TOML form's setting of DeepEP's dispatch: Parallelism.expert_parallel_comm_backend
#: ("standard" or "deepep", job_config.py at 9810191bb^), added by #2107
DEEPEP_TOML = "; DeepEP's dispatch (expert_parallel_comm_backend) from #2107 (2025-12-17)"


def _toml_versions(m: Model, lay, expert_tp: bool, deepep: bool = False) -> str:
    """Which torchtitan versions read the TOML form of this plan: before #2386; with
    expert parallelism the versions that had it (from #1324, and with tp the ones with
    expert_tensor_parallel_degree, from #1555), and only from #1660 where ep does not
    cover all of cp (and tp, where experts are not split tp ways); with DeepEP's dispatch
    from #2107."""
    text = (TORCHTITAN_ETP_TOML_VERSIONS if expert_tp else TORCHTITAN_TOML_VERSIONS) + (DEEPEP_TOML if deepep else "")
    if not (m.moe and lay.ep > 1):
        return text
    uncovered = [f"cp{lay.cp}"] if lay.cp > 1 else []
    if lay.etp == 1 and lay.tp > 1:
        uncovered.append(f"tp{lay.tp}")
    covered = lay.cp * (lay.tp if lay.etp == 1 else 1)
    if lay.ep % covered == 0:
        return text if expert_tp else f"{text}; expert parallelism from dp2ep (#1324, 2025-07-08)"
    return (
        f"{text}; this plan's only from {EP_ANY_FROM}: until then torchtitan asserted that ep covers all of cp, "
        f"and of tp where experts are not split tp ways, and ep{lay.ep} does not cover {' x '.join(uncovered)}"
    )


class Checkpointing(NamedTuple):
    """The plan's recomputation in torchtitan: the Python value of
    ``Trainer.Config.activation_checkpoint`` (None where no policy matches), the
    ``[activation_checkpoint]`` table of the old TOML form (None likewise), and a note
    where the two forms differ from the plan or from each other."""

    python: str | None
    toml: dict | None
    note: str | None = None


def activation_checkpoint(recompute: str) -> Checkpointing:
    """torchtitan's activation checkpointing for the plan's ``recompute``. The names were
    read at b5bcd76: torchtitan/distributed/activation_checkpoint.py, whose policy
    classes (#3674, 2026-06-15) are FullAC, SelectiveAC (per-op: pipesim's ``op``) and
    MemoryBudgetAC, or None for none; the Trainer's default is SelectiveAC, and a model's
    config_registry may set another (llama3_405b: FullAC), so the recipe always says it.
    Before #2386 the TOML's [activation_checkpoint] ``mode`` was none, full or selective
    with ``selective_ac_option`` "op" or N (a full checkpoint every Nth layer)."""
    if recompute == "none":
        return Checkpointing("None", {"mode": "none"})
    if recompute == "full":
        return Checkpointing("FullAC.Config()", {"mode": "full"})
    if recompute == "op":
        return Checkpointing("SelectiveAC.Config()", {"mode": "selective", "selective_ac_option": "op"})
    if recompute.startswith("every-"):
        n = recompute.removeprefix("every-")
        return Checkpointing(
            None,
            {"mode": "selective", "selective_ac_option": n},
            f"the plan checkpoints {every_nth_layer(n)}, which torchtitan's TOML form took as selective_ac_option = "
            f'"{n}" and its policy classes (#3674, 2026-06-15) no longer offer: set config.activation_checkpoint '
            "yourself (FullAC.Config() checkpoints every layer)",
        )
    return Checkpointing(
        None,
        None,
        "the plan recomputes selectively as Megatron-LM does (the attention core's inner state), which no "
        'torchtitan policy does: its SelectiveAC is per-op checkpointing (pipesim\'s recompute = "op" in a '
        "--training file prices it), and the base configuration's own activation_checkpoint stays in place; "
        "plan with --recompute none or full, or that training file, for a setting torchtitan runs as priced",
    )


def launch_line(plan: Plan) -> str:
    """How to launch the configuration function, read at b5bcd76: run_train.sh starts
    torchrun on one host (``--rdzv_endpoint localhost:0``, no ``--nnodes``), so it serves
    a plan on one node only; across nodes, torchrun on every node with the node count and
    a shared rendezvous, as torchtitan's multinode_trainer.slurm runs it."""
    per_node = plan.cluster.gpus_per_node
    nodes = max(1, plan.cluster.gpus // per_node)
    if nodes == 1:
        return f"run: MODULE=my_plan CONFIG=pipesim_plan NGPU={plan.cluster.gpus} ./run_train.sh"
    return (
        f"run on each of the {nodes} nodes (as torchtitan's multinode_trainer.slurm does): torchrun --nnodes {nodes} "
        f"--nproc_per_node {per_node} --rdzv_backend c10d --rdzv_endpoint <first node>:29500 -m torchtitan.train "
        "--module my_plan --config pipesim_plan"
    )


def _flag(key: str, v) -> str:
    """A setting on torchtitan's command line (tyro): a bool is a flag (its error message's
    ``--training.disable_cuda_graphs``), ``no-`` before the hyphenated name its negation
    (docs/debugging.md at b5bcd76: ``--profiler.no-enable-memory-snapshot``); anything
    else takes its value."""
    if isinstance(v, bool):
        section, name = key.rsplit(".", 1)
        return f"--{section}.{name}" if v else f"--{section}.no-{name.replace('_', '-')}"
    return f"--{key} {v}"


def torchtitan_python(
    plan: Plan, base: tuple[str, str, str], par: dict, training: dict, ac: Checkpointing, extra: TrainerLines
) -> str:
    """The current form (torchtitan from #2386): a function returning ``Trainer.Config``,
    here the model's own full configuration (``base``: ``torchtitan_base``'s module,
    function and hint) with the plan's parallelism, batch, activation checkpointing, CUDA
    graphs, precision and AsyncTP (``torchtitan_trainer``)."""
    module, function, hint = base
    policy = (ac.python or "").removesuffix(".Config()")
    configs = sorted({"ParallelismConfig", *extra.config_names})
    lines = [
        f"# my_plan.py; {launch_line(plan)}",
        f"from torchtitan.config import {', '.join(configs)}",
        *([f"from torchtitan.distributed.activation_checkpoint import {policy}"] if policy and policy != "None" else []),
        # no torchtitan configuration of its own matches the model: say what the import must give
        *(
            [
                f"# {module}.{function}: yours to write, a function returning Trainer.Config for {plan.model.name} "
                f"(its model_spec, data, optimizer{'; ' + hint if hint else ''})"
            ]
            if module == PLACEHOLDER[0]
            else []
        ),
        f"from {module} import {extra.base}",
        *extra.imports,
        "",
        "",
        "def pipesim_plan():",
        f"    config = {extra.base}()",
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
    if ac.python:
        lines.append(f"    config.activation_checkpoint = {ac.python}")
    lines += extra.lines
    lines.append("    return config")
    return "\n".join(lines) + "\n"


def torchtitan_toml(plan: Plan, r: Result, par: dict, lay, ac: Checkpointing, etp: int | None = None) -> str:
    """The same settings in the TOML job file of torchtitan before #2386, whose names
    differed: sequences per micro-batch (``pipeline_parallel_microbatch_size``) and per
    data-parallel rank (``local_batch_size``) instead of token counts, and the context
    exchange chosen by ``context_parallel_rotate_method``; ``etp``, where given, as
    ``expert_tensor_parallel_degree`` (tp or 1: the versions from #1555 took only those)."""
    t = plan.training
    old = {k: v for k, v in par.items() if k not in ("num_pp_microbatches", "context_parallel_load_balancer")}
    if "module_fqns_per_model_part" in old:  # the output head was "output" until #2937 (2026-04-27) named it lm_head
        old["module_fqns_per_model_part"] = [
            [OLD_HEAD if x == "lm_head" else x for x in p] for p in old["module_fqns_per_model_part"]
        ]
    if etp is not None:
        old["expert_tensor_parallel_degree"] = etp
    if lay.pp > 1:
        old["pipeline_parallel_microbatch_size"] = lay.micro_batch
    # AsyncTP was a parallelism setting, with torch.compile on, until #4045 (job_config.py
    # at 9810191bb^: Parallelism.enable_async_tensor_parallel, Compile.enable)
    if async_tp_on(lay, t):
        old["enable_async_tensor_parallel"] = True
    if comm_backend(plan.model, lay, t) == "deepep":
        old["expert_parallel_comm_backend"] = "deepep"
    rotate = ROTATE_METHODS.get(t.cp_comm)
    if lay.cp > 1 and rotate:
        old["context_parallel_rotate_method"] = rotate
    # local_batch_size is one forward's batch per data-parallel rank, and the gradient
    # accumulation steps global / (local x dp) (train.py before #2386); with a pipeline that
    # forward is the step's M micro-batches, without one it is a single micro-batch
    local = t.global_batch // lay.dp if lay.pp > 1 else lay.micro_batch
    training = {"local_batch_size": local, "global_batch_size": t.global_batch, "seq_len": t.seq}
    toml = ["[parallelism]"] + [f"{k} = {_toml_value(v)}" for k, v in old.items()] + [""]
    toml += ["[training]"] + [f"{k} = {_toml_value(v)}" for k, v in training.items()]
    if ac.toml:
        toml += ["", "[activation_checkpoint]"] + [f"{k} = {_toml_value(v)}" for k, v in ac.toml.items()]
    if async_tp_on(lay, t):
        toml += ["", "[compile]", "enable = true"]
    return "\n".join(toml) + "\n"


def _fqns(p: Part) -> list[str]:
    names = ["tok_embeddings"] if p.embedding else []
    names += [f"layers.{i}" for i in p.layers]
    return names + (["norm", "lm_head"] if p.head else [])
