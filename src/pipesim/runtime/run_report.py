"""What ``pipesim run`` prints once its ranks are back: each schedule's check, measured
timeline or measured-against-simulated table, as text or JSON."""

from __future__ import annotations

import dataclasses

from ..output import console, emit_json, pct


def report(args, results, skipped) -> int:
    from ..render.terminal import print_timeline
    from .results import compare

    failed = [r for r in results if r.checked and not r.passed]
    if args.json:
        rows = []
        for r in results:
            d = {
                "schedule": r.schedule.name,
                "pp": r.schedule.pp,
                "microbatches": r.schedule.microbatches,
                "makespan": r.timeline.end - r.timeline.start,
                "timeline": [[[str(e.item), e.start, e.end] for e in evs] for evs in r.timeline.events],
            }
            if r.checked:
                d.update(errors=r.errors, tolerance=r.tolerance, passed=r.passed, losses=list(r.losses.values()))
            if r.costs is not None:
                c = compare(r, args.comm)
                # what the ranks slept; the P2P latency the simulation added is simulated.comm
                # (the durations' own comm, 0, read as the latency used)
                slept = {k: v for k, v in r.costs.to_dict().items() if k != "comm"}
                d.update(
                    costs=slept,
                    latency=r.latency,
                    measured={"makespan": c.measured.makespan, "bubble_ratio": c.measured.bubble_ratio},
                    simulated={"makespan": c.simulated.makespan, "bubble_ratio": c.simulated.bubble_ratio, "comm": c.comm},
                    makespan_error=c.makespan_error,
                    accounted=dataclasses.asdict(c.accounted),
                )
            rows.append(d)
        emit_json({"schedules": rows, "skipped": [{"schedule": n, "error": e} for n, e in skipped]})
        return 1 if failed else 0
    out = console()
    for r in results:
        s = r.schedule
        out.print(f"[bold]{s.name}[/]  pp={s.pp}  M={s.microbatches}  placement={s.placement.kind}  {s.num_ops} ops")
        if r.checked:
            for rank, err in enumerate(r.errors):
                verdict = "[green]PASS[/]" if err <= r.tolerance else "[red]FAIL[/]"
                where = f" (pipeline rank {rank % s.pp}, EP rank {rank // s.pp})" if len(r.errors) > s.pp else ""
                out.print(f"  rank {rank}{where}: largest relative error {err:.2e}  {verdict}")
        if r.costs is not None:
            c = compare(r, args.comm)
            source = "given" if args.comm is not None else "measured"
            out.print(f"  synthetic: {_costs_text(r.costs)}; P2P latency {c.comm * 1e6:.0f} us ({source})")
            out.print(f"  {'':10} {'makespan':>12} {'bubble':>8}")
            out.print(f"  {'measured':10} {c.measured.makespan * 1e3:9.1f} ms {pct(c.measured.bubble_ratio):>8}")
            out.print(f"  {'simulated':10} {c.simulated.makespan * 1e3:9.1f} ms {pct(c.simulated.bubble_ratio):>8}")
            error = "n/a" if c.makespan_error is None else f"{c.makespan_error:+.1%}"
            out.print(f"  {'difference':10} {error:>11} {c.bubble_difference * 100:+6.1f} pts")
            a = c.accounted
            out.print(f"  {'re-timed':10} {a.makespan * 1e3:9.1f} ms   (the order simulated with what the run took)")
            out.print(
                f"  the run took: ops {a.overrun:+.1%} on their durations, {a.overhead * 1e6:.0f} us between a"
                f" rank's ops, {a.wait * 1e6:.0f} us a transfer"
            )
        else:
            from ..metrics import summarize

            rep = summarize(s, r.timeline)
            out.print(f"  measured makespan {rep.makespan * 1e3:.1f} ms, bubble {pct(rep.bubble_ratio)}")
        if args.timeline:
            print_timeline(out, s, r.timeline, args.width)
    for name, err in skipped:
        out.print(f"[dim]{name}: skipped ({err})[/]")
    if any(r.checked for r in results):
        checked = [r for r in results if r.checked]
        if failed:
            names = ", ".join(r.schedule.name for r in failed)
            out.print(f"[red]FAIL[/]: {names} differ from one process by more than {checked[0].tolerance:g}")
        else:
            what = f"{len(checked)} schedules" if len(checked) > 1 else checked[0].schedule.name
            out.print(f"[green]PASS[/]: {what}: losses and every gradient match one process (tolerance {checked[0].tolerance:g})")
    return 1 if failed else 0


def _costs_text(costs) -> str:
    def ms(v):
        return ",".join(f"{x * 1e3:g}" for x in v) + "ms" if isinstance(v, tuple) else f"{v * 1e3:g}ms"

    parts = [f"F={ms(costs.f)}", f"B={ms(costs.b)}", f"W={ms(costs.w)}"]
    if costs.bw is not None:
        parts.append(f"BW={ms(costs.bw)}")
    if costs.pair is not None:
        parts.append(f"F&B={ms(costs.pair)}")
    return " ".join(parts)
