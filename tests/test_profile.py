"""pipesim profile: Kineto traces in, component costs, per-stage costs and timelines out.

The fixtures are small Kineto-format traces written here with plain numbers (what
torch.profiler exports: ``traceEvents`` with ``cat`` user_annotation / cuda_runtime /
kernel, ``args.correlation``), so every expected value is a sum of numbers in the test.
"""

from __future__ import annotations

import gzip
import json

import pytest

from pipesim import build, simulate
from pipesim.cli import main
from pipesim.components import ComponentCosts, LayerCosts
from pipesim.costfile import load_cost_file
from pipesim.deps import needs, produces
from pipesim.errors import PipesimError
from pipesim.files import load_timeline
from pipesim.ir import ops_of
from pipesim.profile.labels import Mapping, action, pipesim_label
from pipesim.profile.measure import profile
from pipesim.profile.trace import read_trace

CPU, BWD = 100, 101  # the annotating thread, autograd's backward thread


def ann(name, ts, dur, tid=CPU):
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}


def launch(corr, ts, tid=CPU):
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": tid, "ts": ts, "dur": 2,
            "args": {"correlation": corr}}  # fmt: skip


def kernel(corr, ts, dur, stream=7, grid=(132, 1, 1)):
    return {"ph": "X", "cat": "kernel", "name": f"k{corr}", "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"correlation": corr, "stream": stream, "grid": list(grid)}}  # fmt: skip


def write(path, events, **meta):
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "H800", "numSms": 132}], **meta, "traceEvents": events}
    text = json.dumps(doc)
    if str(path).endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def pair_trace():
    """Two layers of F&B parts. Kernels run after their launching range has closed (the
    GPU lags the CPU), ``mlp(B)``'s kernels are launched by autograd's thread, and one
    kernel is launched outside every annotation."""
    ev = [ann("ProfilerStep#1", 0, 10_000)]
    corr = 0
    times = {}  # component -> list of kernel durations
    t, gpu = 10, 2000  # CPU and GPU clocks: kernels run one after another
    for _layer in range(2):
        for name, stream, durs in (
            ("attn(F)", 7, (100, 50)),
            ("dispatch(F)", 27, (300,)),
            ("mlp(B)", 7, (200,)),
            ("combine(B)", 27, (250,)),
            ("mlp(W)", 7, (80,)),
        ):
            ev.append(ann(name, t, 40))
            for d in durs:
                corr += 1
                tid = BWD if name == "mlp(B)" else CPU
                ev.append(launch(corr, t + 5, tid))
                ev.append(kernel(corr, gpu, d, stream, (20, 1, 1) if stream == 27 else (132, 1, 1)))
                # Kineto's flow from launch to kernel and its GPU-side copy of the
                # annotation: both repeat what correlation ids say, and must not count twice
                ev.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": 1, "tid": tid, "ts": t + 5})
                ev.append({"ph": "f", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": 0, "tid": stream, "ts": gpu, "bp": "e"})
                ev.append({"ph": "X", "cat": "gpu_user_annotation", "name": name, "pid": 0, "tid": stream, "ts": gpu, "dur": d})
                gpu += d + 5
                times.setdefault(name, []).append(d)
            t += 50
    ev.append(launch(999, 5000))  # outside every annotation
    ev.append(kernel(999, 9000, 7))
    return ev, times


def test_kernels_go_to_the_annotation_that_launched_them(tmp_path):
    ev, times = pair_trace()
    prof = profile(write(tmp_path / "t.json", ev))
    rows = {str(r.component): r for r in prof.rows}
    assert set(rows) == set(times)
    for name, durs in times.items():
        assert rows[name].instances == 2
        assert rows[name].per_layer == pytest.approx(sum(durs) / 2 * 1e-6)
    assert rows["attn(F)"].streams == (7,) and rows["dispatch(F)"].streams == (27,)
    assert rows["mlp(B)"].kernels == 2  # launched from the backward thread
    assert prof.unassigned == 1 and prof.unassigned_time == pytest.approx(7e-6)
    assert prof.layers == 2 and prof.gpu and prof.comm_sms_seen == 20
    first = min(k["ts"] for k in ev if k["cat"] == "kernel")
    last = max(k["ts"] + k["dur"] for k in ev if k["cat"] == "kernel")
    assert prof.window == pytest.approx((last - first) * 1e-6)


def test_gzipped_trace_reads_the_same(tmp_path):
    ev, _ = pair_trace()
    plain = profile(write(tmp_path / "t.json", ev))
    packed = profile(write(tmp_path / "t.json.gz", ev))
    assert [(r.component, r.per_layer, r.streams) for r in packed.rows] == [
        (r.component, r.per_layer, r.streams) for r in plain.rows
    ]


def test_a_trace_split_across_read_chunks_reads_the_same(tmp_path, monkeypatch):
    """The reader decodes the file in pieces; values cut at a piece's end must survive."""
    import pipesim.profile.trace as trace_mod

    ev, _ = pair_trace()
    path = write(tmp_path / "t.json", ev)
    whole = read_trace(path)
    monkeypatch.setattr(trace_mod, "CHUNK", 7)
    pieces = read_trace(path)
    assert pieces.kernels == whole.kernels and pieces.ranges == whole.ranges and pieces.launches == whole.launches


def test_cost_file_loads_back_and_pairs_like_the_measured_parts(tmp_path, capsys):
    ev, times = pair_trace()
    path = write(tmp_path / "t.json", ev)
    out = tmp_path / "costs.toml"
    assert main(["profile", str(path), "-o", str(out)]) == 0
    costs, mem = load_cost_file(out)
    assert mem is None and len(costs.stages[0]) == 2
    layer = costs.stages[0][0]
    us = 1e-6
    assert layer.attn_f == pytest.approx(150 * us) and layer.dispatch_f == pytest.approx(300 * us)
    assert layer.mlp_b == pytest.approx(200 * us) and layer.combine_b == pytest.approx(250 * us)
    assert layer.mlp_w == pytest.approx(80 * us) and layer.attn_w == 0  # B measured, W not: none
    # compute never ran beside communication here (kernels do not overlap), so the file
    # keeps the SMs the communication kernels held
    assert costs.comm_sms == 20 and costs.total_sms == 132
    capsys.readouterr()
    assert main(["pair", "--components", str(out), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["pair_time"]
    # the same parts by hand: attn_b defaults to attn_f in LayerCosts, so give it as measured (0)
    hand = LayerCosts(attn_f=150 * us, mlp_f=0, dispatch_f=300 * us, combine_f=0, attn_b=0, attn_w=0, mlp_b=200 * us,
                      mlp_w=80 * us, dispatch_b=0, combine_b=250 * us)  # fmt: skip
    want = ComponentCosts.uniform(hand, 2, comm_sms=20, total_sms=132)
    from pipesim.ir import Op, Pair

    assert got == pytest.approx(want.pair_time(Pair(Op("F", 0, 1), Op("BW", 1, 0)), 0, 0))


def test_compute_measured_beside_communication_is_not_slowed_twice(tmp_path):
    """A compute kernel that ran while a communication kernel held SMs already took the
    longer time: the cost file then sets comm_sms = 0."""
    ev = [ann("attn(F)", 0, 10), launch(1, 1), kernel(1, 100, 50), ann("dispatch(F)", 20, 10), launch(2, 21)]
    ev.append(kernel(2, 110, 30, 27, (20, 1, 1)))
    out = tmp_path / "c.toml"
    assert main(["profile", str(write(tmp_path / "t.json", ev)), "-o", str(out)]) == 0
    costs, _ = load_cost_file(out)
    assert costs.comm_sms == 0


def test_the_mapping_option_reads_other_names(tmp_path):
    ev = [ann("self_attn(F)", 0, 10), launch(1, 1), kernel(1, 100, 50)]
    ev += [ann("layer3.experts.fwd", 20, 10), launch(2, 21), kernel(2, 200, 70)]
    path = write(tmp_path / "t.json", ev)
    with pytest.raises(PipesimError, match="none of which pipesim reads"):
        profile(path)
    prof = profile(path, Mapping.parse("attn=self_attn,mlp_f=layer*.experts.fwd"))
    assert {str(r.component): r.per_layer for r in prof.rows} == {"attn(F)": pytest.approx(50e-6), "mlp(F)": pytest.approx(70e-6)}
    toml = tmp_path / "map.toml"
    toml.write_text('[map]\nattn = "self_attn"\nmlp_f = ["layer*.experts.fwd"]\n')
    assert len(profile(path, Mapping.parse(str(toml))).rows) == 2
    with pytest.raises(PipesimError, match="unknown component 'attention'"):
        Mapping.parse("attention=x")


def test_a_name_mapped_to_two_components_is_refused(tmp_path, capsys):
    """--map attn=blk,mlp=blk gave blk(F)'s 50 us to mlp alone (the last stem won) and
    wrote attn_f = 0 in the cost file, unsaid; a glob given to two whole-name fields went
    to the first. Either is one line naming the name and both components."""
    path = write(tmp_path / "t.json", [ann("blk(F)", 0, 10), launch(1, 1), kernel(1, 100, 50)])
    out = tmp_path / "c.toml"
    for spec, says in (
        ("attn=blk,mlp=blk", "'blk' to both attn and mlp"),
        ("attn_f=b*,mlp_f=b*", "'b*' to both attn_f and mlp_f"),
    ):
        assert main(["profile", str(path), "--map", spec, "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"--map gives {says}; give each name one component" in err, err
        assert not out.exists()
    # a stem and a whole name are different names (blk(F) against blk): both may be given
    assert main(["profile", str(path), "--map", "attn=blk,mlp_f=blk", "-o", str(out)]) == 0
    assert load_cost_file(out)[0].stages[0][0].attn_f == pytest.approx(50e-6)


@pytest.mark.parametrize("name", ["map.TOML", "names.txt"])
def test_a_map_file_is_read_whatever_its_name_ends_with(name, tmp_path):
    """A [map] file named map.TOML or names.txt was taken for an inline spec: "--map takes
    COMPONENT=NAME pairs ..., got 'names.txt'"."""
    path = write(tmp_path / "t.json", [ann("blk(F)", 0, 10), launch(1, 1), kernel(1, 100, 50)])
    (tmp_path / name).write_text('[map]\nattn = "blk"\n')
    prof = profile(path, Mapping.parse(str(tmp_path / name)))
    assert {str(r.component): r.per_layer for r in prof.rows} == {"attn(F)": pytest.approx(50e-6)}


def test_cpu_only_trace_falls_back_to_range_durations_and_says_so(tmp_path, capsys):
    ev = [ann("attn(F)", 0, 300), ann("mlp(F)", 400, 500), {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1,
                                                            "tid": CPU, "ts": 10, "dur": 5}]  # fmt: skip
    path = write(tmp_path / "t.json", ev)
    prof = profile(path)
    assert not prof.gpu and {r.component.field: r.per_layer for r in prof.rows} == {"attn_f": 300e-6, "mlp_f": 500e-6}
    assert main(["profile", str(path)]) == 0
    out = capsys.readouterr().out
    assert "no GPU kernels in the trace: times are the CPU durations" in out
    assert "components: 1 layer; times per layer" in out  # one instance of each: one layer, not "1 layers"


def test_a_fifo_is_refused_not_read(tmp_path, capsys):
    """Reading a FIFO would wait for a writer for ever."""
    import os

    os.mkfifo(tmp_path / "trace.json")
    assert main(["profile", str(tmp_path / "trace.json")]) == 2
    assert "it is not a regular file" in capsys.readouterr().err


@pytest.mark.parametrize(
    "content, says",
    [
        ("this is not json", "not a profiler trace: found 't' where a JSON object with traceEvents should be"),
        ('{"schemaVersion": 1, "deviceProperties": []}', "without traceEvents"),
        ('{"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "x", "ts": 1', "not valid JSON"),
        ("[1, 2]", "its events include a number, expected event objects"),
        ('"text"', "found '\"'"),
        ("[" * 100_000 + "]" * 100_000, "JSON nested too deeply"),
        ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 5, "dur": -3}]}', "has ts 5 and dur -3"),
        ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": NaN, "dur": 3}]}', "has ts nan and dur 3"),
        ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 0, "dur": 1e308}]}', "a duration from 0 to a day"),
        # malformed fields the fuzzer found (benchmarks/fuzz.py): read past, not a traceback
        ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 0, "dur": 1, "args": 1}]}', "none of which"),
        ('{"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "a", "ts": 0, "dur": 1, "pid": []}]}', "none of which"),
        (
            '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 0, "dur": 1, "args": {"stream": NaN}}]}',
            "none of which",
        ),
    ],
)
def test_what_is_not_a_profiler_trace_is_one_line(tmp_path, capsys, content, says):
    path = tmp_path / "bad.json"
    path.write_text(content)
    assert main(["profile", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pipesim: error: ") and says in err


def test_unrecognised_annotations_say_what_was_found_and_expected(tmp_path, capsys):
    ev = [ann("my_layer_fwd", 0, 10), launch(1, 1), kernel(1, 100, 50), ann("ProfilerStep#0", 0, 100)]
    assert main(["profile", str(write(tmp_path / "t.json", ev))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert (
        "(0 operators), 1 GPU kernels and 1 annotations ('my_layer_fwd')" in err
        and "attn(F)" in err
        and "PP:2F0" in err
        and "--map" in err
    )


def test_no_events_and_missing_inputs(tmp_path, capsys):
    assert main(["profile", str(write(tmp_path / "t.json", []))]) == 2
    assert "found no events at all" in capsys.readouterr().err
    assert main(["profile", str(tmp_path / "none.json")]) == 2
    assert "no trace" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["profile", str(empty)]) == 2
    assert "no traces in this folder" in capsys.readouterr().err
    ev = [ann("attn(F)", 0, 10)]
    assert main(["profile", str(write(tmp_path / "a.json", ev)), "-o", str(tmp_path / "x.txt")]) == 2
    assert ".toml" in capsys.readouterr().err
    assert not (tmp_path / "x.txt").exists()


def test_the_folder_of_several_schedules_names_its_subfolders(tmp_path, capsys):
    """run --schedules a,b --profile DIR writes DIR/a/rank0.json, DIR/b/...: DIR itself
    holds no trace, and the refusal says which folders do."""
    for name in ("zb-h1", "1f1b"):
        (tmp_path / name).mkdir()
        write(tmp_path / name / "rank0.json", [ann("attn(F)", 0, 10)])
    assert main(["profile", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert (
        f"{tmp_path}: no traces in this folder, but its folders 1f1b, zb-h1 hold some (a run of several schedules): give one, e.g. {tmp_path / '1f1b'}"
        in err
    )


def test_traces_beside_a_list_runs_folders_say_which_were_read(tmp_path, capsys):
    """DIR/rank0.json of an earlier one-schedule run beside DIR/1f1b/ and DIR/zb-h1/ of a
    list run: profile DIR reads DIR's own trace, and said nothing of the folders beside."""
    write(tmp_path / "rank0.json", [ann("attn(F)", 0, 10)])
    for name in ("zb-h1", "1f1b"):
        (tmp_path / name).mkdir()
        write(tmp_path / name / "rank0.json", [ann("attn(F)", 0, 10)])
    assert main(["profile", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"read the traces in {tmp_path} itself (rank0.json); its folders 1f1b, zb-h1 hold other runs' traces" in out, out
    assert main(["profile", str(tmp_path / "1f1b")]) == 0
    assert "other runs' traces" not in capsys.readouterr().out


# ---------------------------------------------------------------------------------------
# pipeline actions


def torch_label(op, stage: int) -> str:
    """PyTorch's own record_function name for an action (schedules._get_profiler_function_name)."""
    torch_sched = pytest.importorskip("torch.distributed.pipelining.schedules")
    kind = {"F": torch_sched.F, "B": torch_sched.I, "W": torch_sched.W, "BW": torch_sched.B}[op.kind]
    return torch_sched._get_profiler_function_name(torch_sched._Action(stage, kind, op.mb))


def action_traces(tmp_path, schedule, label, dur=lambda op: 100, **meta):
    """One CPU-only trace per rank: the schedule's items back to back, 10 us apart;
    ``meta``: top-level keys beside traceEvents."""
    pl = schedule.placement
    for r, items in enumerate(schedule.ranks):
        t, ev = 0, []
        for item in items:
            stages = tuple(pl.stage_of(r, op.chunk, op.mb) for op in ops_of(item))
            d = sum(dur(op) for op in ops_of(item))
            ev.append(ann(label(item, r, stages), t, d))
            t += d + 10
        write(tmp_path / f"rank{r}.json", ev, distributedInfo={"rank": r}, **meta)
    return tmp_path


@pytest.mark.parametrize("name, kw", [("1f1b", {}), ("zb-h1", {}), ("interleaved-1f1b", {"chunks": 2}), ("zb-v", {})])
def test_pytorch_action_labels_give_back_the_schedule(tmp_path, name, kw):
    """PyTorch's labels name global stages, not chunks: the chunks and the placement
    (flat, looped, V) come back from which stages each rank ran."""
    s = build(name, 2, 4, **kw)
    prof = profile(action_traces(tmp_path, s, lambda it, r, st: torch_label(it, st[0])))
    assert prof.schedule.ranks == s.ranks
    assert prof.schedule.placement == s.placement


def test_pipesim_labels_with_pairs_give_back_dualpipe_and_its_costs(tmp_path):
    s = build("dualpipe", 4, 8)
    costs = {"F": 100, "B": 150, "W": 60, "BW": 210}
    prof = profile(action_traces(tmp_path, s, lambda it, r, st: pipesim_label(it, r, st, s.name), lambda op: costs[op.kind]))
    assert prof.schedule.ranks == s.ranks and prof.schedule.placement == s.placement and prof.schedule.name == "dualpipe"
    c = prof.stage_costs
    gap = 10e-6  # between items, with every input ready: the runtime's time per item
    assert c.f == pytest.approx((100e-6 + gap,) * 4)
    assert c.pair == pytest.approx(100e-6 + 210e-6 + gap)
    assert len(prof.timeline.events) == 4 and sum(map(len, prof.timeline.events)) == sum(map(len, s.ranks))
    simulate(s, c)  # the costs simulate


def runtime_traces(tmp_path, schedule, work, pre, post, transfer):
    """One trace per rank of a run timed as the runtime spends its time: before each item
    it takes its inputs (``pre`` us once they are there), then works (``work[kind]`` us,
    the labelled range), then posts its sends (``post`` us); a tensor reaches another
    rank ``transfer`` us after its sender finished posting. Items run in each rank's
    order as soon as their inputs arrive."""
    pl = schedule.placement
    arrive, ends, ev = {}, [None] * schedule.pp, [[] for _ in range(schedule.pp)]
    nxt = [0] * schedule.pp
    while any(n < len(items) for n, items in zip(nxt, schedule.ranks)):
        for r, items in enumerate(schedule.ranks):
            if nxt[r] == len(items):
                continue
            item = items[nxt[r]]
            keys = [k for op in ops_of(item) for k in needs(pl, r, op)]
            if not all((k, r) in arrive for k in keys):
                continue
            ready = max([arrive[(k, r)] for k in keys] + [0 if ends[r] is None else ends[r] + post])
            start = ready + pre
            end = start + sum(work[op.kind] for op in ops_of(item))
            stages = tuple(pl.stage_of(r, op.chunk, op.mb) for op in ops_of(item))
            ev[r].append(ann(pipesim_label(item, r, stages, schedule.name), start, end - start))
            for op in ops_of(item):
                for k in produces(r, op):
                    arrive.update({(k, dst): end if dst == r else end + post + transfer for dst in range(schedule.pp)})
            ends[r], nxt[r] = end, nxt[r] + 1
    for r in range(schedule.pp):
        write(tmp_path / f"rank{r}.json", ev[r])
    return tmp_path


@pytest.mark.parametrize("name, pp", [("1f1b", 4), ("dualpipe", 4), ("zb-v", 2)])
def test_measured_overhead_and_latency_simulate_back_the_run(tmp_path, name, pp):
    """The costs of a run timed as the runtime spends its time (see ``runtime_traces``)
    simulate it back item for item: the time between items with every input there is
    pre + post, and the P2P latency is the transfer alone, because the wait for a remote
    input holds the sender's post and the receiver's pre too, and the simulation already
    counts those once in the sender's item."""
    s = build(name, pp, 8)
    pre, post, transfer = 3, 7, 20
    prof = profile(runtime_traces(tmp_path, s, {"F": 100, "B": 150, "W": 60, "BW": 210}, pre, post, transfer))
    assert prof.schedule.ranks == s.ranks
    c = prof.stage_costs
    assert c.comm == pytest.approx(transfer * 1e-6)
    assert c.f == pytest.approx(((100 + pre + post) * 1e-6,) * s.placement.stages)
    sim = simulate(s, c)
    for measured, simulated in zip(prof.timeline.events, sim.events):
        assert [e.item for e in measured] == [e.item for e in simulated]
        assert [e.start for e in measured] == pytest.approx([e.start for e in simulated], abs=1e-9)
    # each simulated item carries the runtime's time after it, the last one's included
    assert sim.end - sim.start == pytest.approx(prof.timeline.end - prof.timeline.start + (pre + post) * 1e-6)


def test_a_run_missing_a_ranks_trace_is_refused(tmp_path, capsys):
    """rank0.json alone of a pp=2 run (rank 1 died before writing its trace) read as a
    whole pp=1 run; the label's pp says a rank is missing."""
    s = build("1f1b", 2, 4)
    action_traces(tmp_path, s, lambda it, r, st: pipesim_label(it, r, st, s.name, s.pp))
    (tmp_path / "rank1.json").unlink()
    assert main(["profile", str(tmp_path), "--flags"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "traces of ranks 0 but none of rank 1 (the run had pp=2); give one per rank" in err


def test_one_ranks_trace_named_alone_is_pointed_to_its_folder(tmp_path, capsys):
    """profile takes one TRACE: `pipesim profile prof/rank0.json` of a pp=2 run was told
    "give one per rank", which the command line cannot take; the folder is what to give."""
    s = build("1f1b", 2, 4)
    action_traces(tmp_path, s, lambda it, r, st: pipesim_label(it, r, st, s.name, s.pp))
    assert main(["profile", str(tmp_path / "rank0.json"), "--flags"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"none of rank 1 (the run had pp=2); give the folder holding every rank's trace ({tmp_path})" in err


def test_a_file_pipesim_wrote_given_as_a_trace_is_named_with_its_reader(tmp_path, capsys):
    """The timeline profile --timeline writes, fed back to profile, was told only 'a JSON
    object without traceEvents'; it and a schedule file are named, with the command that
    reads each."""
    s = build("1f1b", 2, 4)
    action_traces(tmp_path, s, lambda it, r, st: pipesim_label(it, r, st, s.name, s.pp))
    tl, sched = tmp_path / "out" / "tl.json", tmp_path / "out" / "s.json"
    tl.parent.mkdir()
    assert main(["profile", str(tmp_path), "--timeline", str(tl)]) == 0
    assert main(["ops", "-s", "1f1b", "--pp", "2", "-m", "4", "-o", str(sched)]) == 0
    capsys.readouterr()
    for path, says in ((tl, f"(a measured timeline, which pipesim draw --measured {tl} draws)"),
                       (sched, f"(a pipesim schedule file, which pipesim simulate -s {sched} runs)")):  # fmt: skip
        assert main(["profile", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{path}: not a profiler trace: a JSON object without traceEvents {says}" in err, err


def test_a_trace_missing_an_op_of_the_step_is_refused(tmp_path, capsys):
    """A trace that lost one op (a profiler that started late, or dropped events) still
    names every micro-batch at every stage through the other kinds, so the routes came
    back whole; it was read as the whole run, its makespan, bubble and costs without the
    op, and its simulate line said SCHEDULE. The op removed here is the expected name."""
    from types import SimpleNamespace

    s = build("1f1b", 2, 4)
    lost = s.ranks[0][1]  # rank 0's second forward: its backward still runs at stage 0
    assert str(lost) == "F0.1"
    partial = SimpleNamespace(placement=s.placement, ranks=(tuple(it for it in s.ranks[0] if it != lost), s.ranks[1]))
    action_traces(tmp_path, partial, lambda it, r, st: pipesim_label(it, r, st, s.name, s.pp))
    assert main(["profile", str(tmp_path), "--flags"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "rank 0: F0.1 is missing" in err and "profile every rank of one whole step" in err, err


@pytest.mark.parametrize("first, second", [(("1f1b", 3), ("1f1b", 2)), (("1f1b", 2), ("zb-h1", 2))])
def test_traces_of_two_runs_in_one_folder_are_refused(tmp_path, capsys, first, second):
    """A folder keeps an earlier run's rank files beyond the next run's pp (or a file is
    copied in from another run): mixed, they read as one run of neither."""
    old, new = build(first[0], first[1], 3), build(second[0], second[1], 3)
    action_traces(tmp_path, old, lambda it, r, st: pipesim_label(it, r, st, old.name, old.pp))
    (tmp_path / "rank0.json").unlink()
    (tmp_path / "new").mkdir()
    action_traces(tmp_path / "new", new, lambda it, r, st: pipesim_label(it, r, st, new.name, new.pp))
    (tmp_path / "new" / "rank0.json").rename(tmp_path / "rank0.json")
    assert main(["profile", str(tmp_path), "--flags"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "traces of more than one run" in err, err
    assert f"rank0.json ran {new.name} at pp={new.pp}" in err and f"rank1.json ran {old.name} at pp={old.pp}" in err


def test_action_label_forms():
    assert str(action("PP:(0F7;7B3)OVERLAP_F_B").item) == "F0.7&BW0.3"
    assert action("PP:1SEND_F0").compute is False and action("PP:0REDUCE_GRAD").compute is False
    assert str(action("Backward 3").item) == "BW0.3"
    assert action("pipesim/F0.3 rank=1 stage=1 of=1f1b").rank == 1
    assert action("pipesim/F0.3 rank=1") is None and action("PP:banana") is None


def test_timeline_file_draws(tmp_path, capsys):
    s = build("zb-h1", 2, 4)
    (tmp_path / "traces").mkdir()
    d = action_traces(tmp_path / "traces", s, lambda it, r, st: pipesim_label(it, r, st, s.name))
    tl = tmp_path / "tl.json"
    assert main(["profile", str(d), "--timeline", str(tl)]) == 0
    sched, timeline = load_timeline(tl)
    assert sched.ranks == s.ranks and timeline.source == "measured"
    assert [e.start for e in timeline.events[0]] == pytest.approx([e.start for e in profile(d).timeline.events[0]])
    svg = tmp_path / "tl.svg"
    assert main(["draw", "--measured", str(tl), "-o", str(svg)]) == 0
    assert "(measured)" in svg.read_text()
    capsys.readouterr()
    assert main(["profile", str(d), "--flags"]) == 0
    flags = capsys.readouterr().out.split()
    assert main(["simulate", "-s", "zb-h1", "--pp", "2", "-m", "4", "--no-timeline", *flags]) == 0


def test_a_trace_of_two_steps_reads_the_first(tmp_path):
    s = build("1f1b", 2, 4)
    pl = s.placement
    for r, items in enumerate(s.ranks):
        ev = []
        for step in range(2):
            for i, item in enumerate(items):
                stages = tuple(pl.stage_of(r, op.chunk, op.mb) for op in ops_of(item))
                ev.append(ann(pipesim_label(item, r, stages, s.name), 10_000 * step + 200 * i, 100))
        write(tmp_path / f"rank{r}.json", ev)
    prof = profile(tmp_path)
    assert prof.schedule.ranks == s.ranks and "more than one step" in " ".join(prof.notes)


def test_outputs_that_need_what_the_trace_lacks_are_one_line(tmp_path, capsys):
    s = build("1f1b", 2, 4)
    (tmp_path / "acts").mkdir()
    d = action_traces(tmp_path / "acts", s, lambda it, r, st: pipesim_label(it, r, st, s.name))
    assert main(["profile", str(d), "-o", str(tmp_path / "c.toml")]) == 2
    assert "no component annotations" in capsys.readouterr().err and not (tmp_path / "c.toml").exists()
    comp = write(tmp_path / "comp.json", [ann("attn(F)", 0, 10)])
    assert main(["profile", str(comp), "--flags"]) == 2
    assert "no pipeline action labels" in capsys.readouterr().err
    assert main(["profile", str(comp), "--timeline", str(tmp_path / "no" / "t.json")]) == 2
    assert "there is no folder" in capsys.readouterr().err
    # the timeline is JSON (what draw --measured reads), as the cost file is TOML
    assert main(["profile", str(comp), "--timeline", str(tmp_path / "t.txt")]) == 2
    assert "use a .json timeline" in capsys.readouterr().err and not (tmp_path / "t.txt").exists()


def test_older_kineto_category_names_read_the_same(tmp_path):
    """Kineto before torch 1.11 wrote Kernel / Runtime; the categories are read in any case."""
    ev = [ann("attn(F)", 0, 10), {**launch(1, 1), "cat": "Runtime"}, {**kernel(1, 100, 50), "cat": "Kernel"}]
    prof = profile(write(tmp_path / "old.json", ev))
    assert prof.gpu and prof.rows[0].per_layer == pytest.approx(50e-6)


def test_a_gzip_bomb_of_metadata_is_refused_before_it_is_decoded(tmp_path, capsys):
    """Metadata beside traceEvents (Kineto's deviceProperties, distributedInfo: a few KB)
    past a megabyte of text is refused as it is read: 10 million tiny lists compress to
    about 60 KB and decoded took 2.8 GB and minutes before this bound."""
    import resource

    path = tmp_path / "bomb.json.gz"
    with gzip.open(path, "wt") as f:
        f.write('{"deviceProperties": [' + "[0]," * 10_000_000 + '0], "traceEvents": []}')
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert main(["profile", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "more than 1,048,576 characters" in err, err
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 300_000  # KB


@pytest.mark.parametrize(
    "name, kw, named", [("zb-h1", {}, "-s zb-h1 "), ("interleaved-1f1b", {"chunks": 3}, "-s interleaved-1f1b --chunks 3 ")]
)
def test_the_simulate_line_names_the_schedule_that_ran(tmp_path, capsys, name, kw, named):
    # the line said "-s SCHEDULE" though pipesim's labels name the schedule; it names it
    # where building it again gives the order measured (with --chunks where not the default)
    s = build(name, 2, 4, **kw)
    d = action_traces(tmp_path, s, lambda it, r, st: pipesim_label(it, r, st, s.name))
    assert main(["profile", str(d)]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith(f"simulate with: pipesim simulate {named}--pp 2 -m 4 --f ")
    argv = line.removeprefix("simulate with: pipesim ").split()
    assert main([*argv, "--no-timeline"]) == 0  # the line runs as printed


def test_the_simulate_line_names_zb_auto_only_where_its_flags_build_the_order_that_ran(tmp_path, capsys):
    """zb-auto orders by the cost flags it is given, and simulate hands it the line's:
    the line named zb-auto where its default costs rebuilt the order, so with a measured
    latency of 5 ops it simulated another order than the one that ran."""
    s = build("zb-auto", 2, 4)  # unit costs, as run builds it
    d = runtime_traces(tmp_path, s, {"F": 100, "B": 100, "W": 100, "BW": 200}, 3, 7, 500)
    assert main(["profile", str(d)]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    argv = line.removeprefix("simulate with: pipesim ").split()
    flags = dict(zip(argv[7::2], argv[8::2]))  # after simulate -s NAME --pp 2 -m 4
    rebuilt = build("zb-auto", 2, 4, **{k[2:]: _value(v) for k, v in flags.items()})
    assert rebuilt.ranks != s.ranks  # these flags order zb-auto otherwise
    assert argv[2] == "SCHEDULE", line


def _value(text: str):
    vals = tuple(float(x) for x in text.split(","))
    return vals[0] if len(vals) == 1 else vals


def test_the_window_of_several_traces_says_it_is_their_sum(tmp_path, capsys):
    # two ranks, each trace 210 us from first to last work (F 100 us, a 10 us gap, BW
    # 100 us: action_traces): "window" printed their sum, 420 us, as if one span of the run
    s = build("1f1b", 2, 1)
    d = action_traces(tmp_path, s, lambda it, r, st: pipesim_label(it, r, st, s.name))
    assert main(["profile", str(d)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith("window 0.42 ms (summed over the 2 traces)")


@pytest.mark.parametrize("old_stamp", ["2026-12-05T08:00:00Z/0a1b2c3d", None])
def test_traces_of_two_runs_of_the_same_schedule_are_refused(tmp_path, capsys, old_stamp):
    """A failed run writes only the ranks that finished: its rank0.json beside an earlier
    run's rank1.json of the same schedule and pp read as one run. Each run stamps its
    traces (pipesimRun); two stamps, or a stamp beside an unstamped trace, are refused."""
    s = build("1f1b", 2, 4)
    old = {} if old_stamp is None else {"pipesimRun": old_stamp}
    action_traces(tmp_path, s, lambda it, r, st: pipesim_label(it, r, st, s.name, s.pp), **old)
    (tmp_path / "new").mkdir()
    new = "2026-12-05T09:00:00Z/ffee0011"
    action_traces(tmp_path / "new", s, lambda it, r, st: pipesim_label(it, r, st, s.name, s.pp), pipesimRun=new)
    assert main(["profile", str(tmp_path / "new"), "--flags"]) == 0  # one run's traces: read
    capsys.readouterr()
    (tmp_path / "new" / "rank0.json").replace(tmp_path / "rank0.json")
    assert main(["profile", str(tmp_path), "--flags"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert f"rank0.json from the run of {new}" in err
    assert ("rank1.json from " + (f"the run of {old_stamp}" if old_stamp else "an unstamped run")) in err
    assert "give the traces of one run" in err
