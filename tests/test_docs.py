"""The documentation is what pipesim does today.

docs/dualpipe.md is what docs/make_docs.py builds from pipesim's output: the text is rebuilt
and compared byte for byte (it holds the hash of each picture's data), and the checked-in
pictures show the timelines the library simulates now. Every other page (README.md and every
docs/*.md, whoever added it) is checked by docs/pages.py: each command it shows runs and exits
as the page says, and the output and figures it quotes are what the command prints now.
The figures docs/layouts.md and docs/fidelity.md quote from benchmarks/published_runs.py,
which the checker does not run (a page runs in a fresh folder), are compared here with one
run of its rows, and the bounds docs/limits.md names with the constants that hold them."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import math
import re
import tomllib
from dataclasses import fields
from pathlib import Path

import pytest

import svgread as sv
from conftest import load_script
from pipesim import build, inputs, simulate
from pipesim.components import PRESETS, ComponentCosts
from pipesim.ir import Op, Pair
from pipesim.planner.specs import Cluster
from pipesim.planner.stragglers import slowest_share
from pipesim.render.chart import Panel

DOCS = Path(__file__).resolve().parents[1] / "docs"


def load(name: str):
    return load_script(DOCS / f"{name}.py")


def make_docs():
    return load("make_docs")


pages = load("pages")


def test_the_walkthrough_is_what_the_commands_print():
    page = make_docs().page()
    assert page == (DOCS / "dualpipe.md").read_text(), "docs/dualpipe.md is out of date: run make docs"


def texts(name: str) -> str:
    root = sv.parse((DOCS / "dualpipe" / name).read_bytes())
    return "\n".join(t.text or "" for t in root.iter(sv.NS + "text"))


def test_the_pictures_show_todays_timelines():
    shown = texts("pp4_m8.svg")
    for name in ("1f1b", "dualpipe", "dualpipev"):
        s = build(name, 4, 8)
        assert Panel(s, simulate(s)).title in shown
    costs = ComponentCosts.uniform(PRESETS["ep-1to1"], 1)
    pair = Pair(Op("F", 0, 1), Op("BW", 1, 0))
    assert f"F&BW pair: {costs.pair_time(pair, 0, 0):.6g} on two streams" in texts("pair.svg")
    root = sv.parse((DOCS / "dualpipe" / "sweep_pp8.svg").read_bytes())
    assert [sv.group(root, f"end:{n}").find(f".//{sv.NS}text").text for n in ("1f1b", "zb-h1", "dualpipe", "dualpipev")] == [
        "M=128"
    ] * 4


@pytest.mark.parametrize("page", pages.pages(), ids=lambda p: p.name)
def test_every_command_on_the_page_runs_and_prints_what_it_quotes(page):
    found = pages.check(page)
    if importlib.util.find_spec("torch") is None and any("pipesim[torch]" in p or "No module named 'torch'" in p for p in found):
        pytest.skip(f"{page.name} runs schedules on torch.distributed: pip install 'pipesim[torch]'")
    assert found == []


def test_the_pages_are_linked_and_their_links_resolve():
    """README links every docs page (but the package description); every relative link
    of every page names a file that exists."""
    readme = pages.ROOT / "README.md"
    linked = set(re.findall(r"\]\(docs/([^)#]+)\)", readme.read_text()))
    for page in pages.pages():
        for target in re.findall(r"\]\(([^)#\s]+)", page.read_text()):
            if not target.startswith(("http://", "https://")):
                assert (page.parent / target).exists(), f"{page.name} links {target}, which does not exist"
    # pages other helpers add are linked by the lead; these are this README's own
    for own in ("schedules.md", "simulate-and-draw.md", "plan.md", "profile-and-calibrate.md", "run-and-export.md"):
        assert own in linked


def test_the_package_description_stands_alone():
    """docs/package.md is the description a package index shows: no relative link or
    picture (they break there), and no URL of a home the project does not have."""
    text = (DOCS / "package.md").read_text()
    assert not re.search(r"\]\((?!https?://)", text)
    assert "github.com/pipesim" not in text and "github.com/pipesim" not in (pages.ROOT / "pyproject.toml").read_text()


def test_the_checker_catches_a_stale_page(tmp_path):
    """A page whose shown output, quoted figure or exit status no longer holds is reported."""
    page = tmp_path / "stale.md"
    page.write_text(
        "```\n$ pipesim simulate --schedule 1f1b --pp 4 -m 8 --no-timeline\nmakespan 34 ...\n```\n\n"
        "It takes 33 units, or 35.\n<!-- quoted: 35 -->\n\n"
        "```\npipesim simulate --schedule dualpipe --pp 5\n```\n\n"
        "*Not run by the docs test: make run-type.*\n\n```\npipesim simulate --pp 3\n```\n"
    )
    found = pages.check(page)
    assert len(found) == 3, found
    assert "no longer prints 'makespan 34 ...'" in found[0] and "'35'" in found[1] and "exited 2, not 0" in found[2]


def test_a_quoted_figure_must_be_in_the_prose(tmp_path):
    """The marker names figures the prose quotes; a figure only the marker names (the prose
    reworded or dropped it) is reported, not found in the marker line itself."""
    page = tmp_path / "reworded.md"
    page.write_text(
        "```\n$ pipesim simulate --schedule 1f1b --pp 4 -m 8 --no-timeline\n```\n\nIt takes a while.\n<!-- quoted: 33 -->\n"
    )
    found = pages.check(page)
    assert len(found) == 1 and "quoted '33' is not in the page's prose" in found[0], found


# --- figures the pages quote from benchmarks/published_runs.py --------------------------------

BENCH = pages.ROOT / "benchmarks" / "published_runs.py"
#: the benchmark's summary of a group of rows (its ``figures``), and a page quoting one
FIGURES = re.compile(
    r"median \|error\| ([\d.]+%), mean ([\d.]+%), worst ([\d.]+%) \((.+?)\), (\d+) within 10%, (\d+) within 15%; "
    r"bias \(mean signed error\) ([-+][\d.]+%), (\d+) of (\d+)"
)
WORDS = "zero one two three four five six seven eight nine ten eleven twelve".split()


class Published:
    """What ``python benchmarks/published_runs.py --no-search`` prints, and its records.

    Its rows run once for the module (about 2 s of CPU: every row on its published layout,
    the 500 W rows again at their bound, no search)."""

    def __init__(self):
        bench = load_script(BENCH)
        rows = tomllib.loads(bench.DATA.read_text())["run"]
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            self.done = bench.run_rows(rows)
            bench.print_rows(self.done)
            bench.print_speed_ups(self.done)
        self.bench, self.text = bench, out.getvalue()
        table = self.text.split("## Pinned", 1)[1].split("\n\n")[1].splitlines()[2:]
        #: each row of the pinned table by name (its * left off): layout, fits, published
        #: step, predicted step, error, published -> predicted, MFU
        self.rows = {}
        for line in table:
            name, *cells = [c.strip() for c in line.strip().strip("|").split("|")]
            self.rows[name.removesuffix(" *")] = cells
        self.speed_ups = {}
        for line in self.text.split("## One change on the same hardware", 1)[1].split("\n\n")[1].splitlines()[2:]:
            name, change, published, predicted, _ = [c.strip() for c in line.strip().strip("|").split("|")]
            self.speed_ups[name] = (published, predicted)

    def error(self, name: str) -> str:
        return self.rows[name][4]

    def metric(self, name: str) -> tuple[str, str]:
        """The published figure and pipesim's, as the row prints them (``1619 -> 1708 ...``)."""
        published, predicted = re.match(r"([\d.]+) -> ([\d.]+)", self.rows[name][5]).groups()
        return published, predicted

    def summary(self, starts: str) -> tuple:
        """The figures of the summary line that starts so."""
        line = next(x for x in self.text.splitlines() if x.startswith(starts))
        return FIGURES.search(line).groups()

    def figures(self, recs: list[dict]) -> tuple:
        """The benchmark's figures over ``recs``, as it prints them for a group."""
        return FIGURES.search(self.bench.figures(recs)).groups()


@pytest.fixture(scope="module")
def published():
    return Published()


def doc(name: str) -> str:
    """A page's text, its whitespace squeezed (a figure may break across lines)."""
    return pages.squeeze((DOCS / name).read_text())


def quoted(name: str, pattern: str) -> tuple[str, ...]:
    found = re.search(pattern, doc(name))
    assert found, f"docs/{name} no longer says {pattern!r}: update the test with the page"
    return found.groups()


def pct(x: str) -> float:
    return float(x.rstrip("%"))


def printed(script: str, *args) -> str:
    """What benchmarks/SCRIPT prints, its ``main(*args)`` run in this process."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        load_script(pages.ROOT / "benchmarks" / script).main(*args)
    return out.getvalue()


def test_the_headline_the_pages_quote_is_what_the_benchmark_prints(published):
    n, *figures = quoted("fidelity.md", r"On the (\d+) rows on known hardware: " + FIGURES.pattern)
    bench = published.summary(f"{n} rows on known hardware: ")
    assert figures[:3] + figures[4:] == list(bench[:3] + bench[4:])
    assert bench[3].startswith(figures[3]), f"the worst row is {bench[3]}"
    n, median, within = quoted(
        "layouts.md", r"The headline over the (\d+) rows on known hardware is a median of ([\d.]+%), with (\d+) rows within 15%"
    )
    assert (n, median, within) == (bench[8], bench[0], bench[5])


def test_the_headline_rows_the_fidelity_page_names_are_the_benchmarks(published):
    """The rows outside 10%, and the headline without the MT-NLG rows."""
    count, deepseek = quoted(
        "fidelity.md", r"The rows outside 10% are MT-NLG's (\w+) \(below\) and DeepSeek-V3 \(([-+][\d.]+%)\)"
    )
    known = [rec for rec in published.done if not published.bench.apart(rec["row"])]
    outside = [rec["row"]["name"] for rec in known if abs(rec["error"]) > 0.10]
    assert sorted(outside) == sorted([n for n in outside if n.startswith("MT-NLG")] + ["DeepSeek-V3"])
    assert WORDS.index(count) == len(outside) - 1 and deepseek == published.error("DeepSeek-V3")
    n, mean, worst, bias = quoted(
        "fidelity.md",
        r"without the MT-NLG rows the other (\d+) give a mean of ([\d.]+%), a worst of ([\d.]+%) and a bias of ([-+][\d.]+%)",
    )
    rest = [rec for rec in known if not rec["row"]["name"].startswith("MT-NLG")]
    figures = published.figures(rest)
    assert (int(n), mean, worst, bias) == (len(rest), figures[1], figures[2], figures[6])


def test_the_groups_left_out_are_quoted_as_the_benchmark_prints_them(published):
    n, sxm, nvl = quoted(
        "fidelity.md",
        r"All (\d+) are predicted fast, by (\d+)% on average \(the mean signed error\) at the H100 SXM's peak and (\d+)% at the H100 NVL's",
    )
    at_sxm = published.summary(f"{n} rows (marked *) left out of those figures: 96 GB")
    at_nvl = published.summary(f"The same {n} rows at the other end")
    for shown, bench in ((sxm, at_sxm), (nvl, at_nvl)):
        assert bench[7] == bench[8] == n and int(shown) == round(-pct(bench[6])), bench
    median, mean, worst, bias = quoted(
        "fidelity.md",
        r"All six are predicted fast: median \|error\| ([\d.]+%), mean ([\d.]+%), worst ([\d.]+%) \(MPT-13B, 64 GPUs\), none within 15%; bias ([-+][\d.]+%)",
    )
    mpt = published.summary("6 rows (marked *) left out of those figures: MosaicML's MPT rows")
    assert (median, mean, worst, "0", bias, "6") == (mpt[0], mpt[1], mpt[2], mpt[5], mpt[6], mpt[7]) and mpt[3].startswith(
        "MPT-13B"
    )
    dense = quoted("fidelity.md", r"The dense rows are ([-+][\d.]+%) and ([-+][\d.]+%)")
    assert dense == (
        published.error("Megatron-Bridge 25.09 Llama 3 70B, 64 H100"),
        published.error("Megatron-Bridge 25.09 Llama 3.1 405B, 1024 H100 (CP2)"),
    )
    # Megatron-Bridge 26.06's group beside the 25.09 rows: each row as printed, the group's figures
    for name, pattern in (
        (
            "25.09 Llama 3.1 405B, 1024 H100 (CP2)",
            r"25.09 at GBS 512 is ([\d,]+) tokens/s a GPU, predicted ([\d,]+) \(([-+][\d.]+%)\)",
        ),
        ("26.06 Llama 3.1 405B, 1024 H100 (CP2)", r"26.06 at GBS 1536 is ([\d,]+), predicted ([\d,]+) \(([-+][\d.]+%)\)"),
        ("25.09 Qwen3-30B-A3B, 16 H100 (EP8)", r"all-to-all is ([\d,]+) tokens/s a GPU \(([-+][\d.]+%)\)"),
        ("26.06 Qwen3-30B-A3B, 16 H100 (EP16)", r"no CUDA graphs, is ([\d,]+), predicted ([\d,]+) \(([-+][\d.]+%)\)"),
    ):
        *figs, error = quoted("fidelity.md", pattern)
        row = f"Megatron-Bridge {name}"
        assert ([f.replace(",", "") for f in figs], error) == (list(published.metric(row))[: len(figs)], published.error(row))
    median, mean, bias, fast, of = quoted(
        "fidelity.md",
        r"The group: median \|error\| ([\d.]+%), mean ([\d.]+%), bias ([-+][\d.]+%), (\d+) of (\d+) predicted fast",
    )
    group = published.summary("2 rows (marked *) left out of those figures: Megatron-Bridge 26.06's DGX H100 rows")
    assert (median, mean, bias, fast, of) == (group[0], group[1], group[6], group[7], group[8])
    n, median, mean, fast = quoted(
        "fidelity.md", r"all (\d+) rows together: median ([\d.]+%), mean ([\d.]+%), (\d+) of \d+ fast\. ### Where"
    )
    every = published.summary(f"All {n} rows together: ")
    assert (median, mean, fast, n) == (every[0], every[1], every[7], every[8])
    at8, at128, pub8, pub128 = quoted(
        "fidelity.md", r"predicted ([\d.]+x) at 8 GPUs and ([\d.]+x) at 128, against a published ([\d.]+x) and ([\d.]+x)"
    )
    float8 = [published.speed_ups[f"torchtitan Llama 3 8B, {n} H100, FSDP + compile + Float8"] for n in (8, 128)]
    assert [(pub8, at8), (pub128, at128)] == float8


def test_the_layouts_page_quotes_each_row_as_the_benchmark_prints_it(published):
    """The table of rows (named as the benchmark names them), the count within 15%, and the
    figures the prose takes from single rows."""
    section = (DOCS / "layouts.md").read_text().split("## Against published runs", 1)[1].split("\n## ", 1)[0]
    table = [line for line in section.splitlines() if line.startswith("| ")][1:]
    within = 0
    for line in table:
        name, shown, pipesim, error = [c.strip() for c in line.strip().strip("|").split("|")]
        name = re.sub(r" [*†‡]$", "", name)
        assert name in published.rows, f"docs/layouts.md names {name!r}, which benchmarks/published_runs.py has not"
        assert (re.match(r"[\d.]+", shown).group(), pipesim, error) == (*published.metric(name), published.error(name)), name
        within += abs(pct(error)) <= 15
    count, of = quoted("layouts.md", r"(\w+) of the (\w+) are within 15%")
    assert (WORDS.index(count.lower()), WORDS.index(of)) == (within, len(table))
    implied, error = quoted("layouts.md", r"pipesim's step implies (\d+) \(([-+][\d.]+%)")
    cp16 = "Llama 3 405B, 16384 GPUs, seq 131072 (CP16)"
    assert (implied, error) == (published.metric(cp16)[1], published.error(cp16))
    qwen30, qwen235 = quoted("layouts.md", r"The Qwen3 MoE rows are fast by (\d+)% \(30B\) and (\d+)% \(235B\)")
    qwen = ["Megatron-Bridge 25.09 Qwen3-30B-A3B, 16 H100 (EP8)", "Megatron-Bridge 25.09 Qwen3-235B-A22B, 256 H100 (TP2 EP32)"]
    assert [int(qwen30), int(qwen235)] == [round(-pct(published.error(q))) for q in qwen]
    # benchmarks/published_layouts.py's published layouts are these rows' (its searches take minutes)
    bridge = "Megatron-Bridge 25.09 Llama 3.1 405B, 1024 H100 (CP2)"
    assert quoted("layouts.md", r"this row ([\d.]+%) faster than published")[0] == published.error(bridge).lstrip("-")
    assert quoted("layouts.md", r"idles \d+% of the step \(([\d.]+) s\)")[0] == published.rows["Llama 3 405B, 16384 GPUs"][3]
    assert quoted("layouts.md", r"on its own interleaved 1F1B\) at ([\d.]+) s")[0] == published.rows[bridge][3]
    assert quoted("layouts.md", r"the published layout's ([\d.]+) s")[0] == published.rows[qwen[1]][3]


# --- limits the pages state ----------------------------------------------------------------------


def test_the_limits_the_page_names_are_the_code():
    """The work limit, every figure the table of other bounds gives beside a constant's name,
    and the largest cost files-and-limits.md states, are those constants."""
    text = doc("limits.md")
    assert [int(n.replace(",", "")) for n in re.findall(r"\*\*([\d,]+) ops\*\*", text)] == [inputs.MAX_OPS]
    found = re.findall(r"(\d[\d,]*)( GiB)?[^|(]*\(`([\w.]+)`\)", text.split("## The other bounds", 1)[1])
    assert len(found) >= 12, found
    for number, gib, name in found:
        where, _, const = name.rpartition(".")
        module = importlib.import_module(f"pipesim.{where or 'inputs'}")
        assert int(number.replace(",", "")) << (30 if gib else 0) == getattr(module, const), name
    assert float(quoted("files-and-limits.md", r"numbers must be finite \(costs up to (1e\d+)\)")[0]) == inputs.MAX_VALUE


def test_the_op_counts_the_architecture_page_times_are_the_schedules():
    """The speed table's op counts (pp=64, M=1024) are the ops each schedule builds."""
    section = doc("architecture.md").split("| pp=64, M=1024 | ops |", 1)[1]
    rows = re.findall(r"\| ([\w-]+)(?: \([^)]*\))? \| ([\d,]+) \|", section)
    assert len(rows) == 4, rows
    for name, ops in rows:
        assert int(ops.replace(",", "")) == build(name, 64, 1024).num_ops, name


def test_the_rank_capacity_the_runtime_page_states_is_the_code():
    capacity = importlib.import_module("pipesim.runtime.capacity")
    per_core, mb = quoted(
        "runtime-moe.md", r"more rank processes than this machine can run: (\d+) per core, and (\d+) MB of free memory"
    )
    assert (int(per_core), int(mb) << 20) == (capacity.PER_CORE, capacity.RANK_MEMORY)


def test_the_peak_memory_figures_the_fidelity_page_quotes_are_the_benchmarks():
    """``python benchmarks/peak_memory.py`` (under a second: no schedule search) against the
    summary and the rows its paragraph names."""
    text = printed("peak_memory.py")
    rows = {}
    for line in text.splitlines():
        if line.startswith("| ") and line.endswith("% |"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0]] = cells
    summary = re.search(
        r"(\d+) rows: (\d+) within 10% \(target: all\), mean \|error\| ([\d.]+%), mean signed ([-+][\d.]+%)", text
    )
    within, n, mean, signed = quoted(
        "fidelity.md", r"(\d+) of its (\d+) rows are within 10% \(mean \|error\| ([\d.]+%), mean signed ([-+][\d.]+%)"
    )
    assert (n, within, mean, signed) == summary.groups()
    pp = "405B FSDP8 TP8 PP8 "
    shown = quoted(
        "fidelity.md",
        r"on the 405B 1F1B row \(([-+][\d.]+%)\), the CP1 row \(([-+][\d.]+%)\) and the interleaved row \(([-+][\d.]+%)\)",
    )
    assert shown == tuple(rows[pp + r][-1] for r in ("1f1b", "CP1 s32K", "interleaved-1f1b"))
    peaks = quoted(
        "fidelity.md",
        r"interleaved 1F1B now peaks below 1F1B \(([\d.]+) against ([\d.]+) GiB\), as the published figures do \(([\d.]+) against ([\d.]+)\)",
    )
    assert peaks == (
        rows[pp + "interleaved-1f1b"][-2],
        rows[pp + "1f1b"][-2],
        rows[pp + "interleaved-1f1b"][2],
        rows[pp + "1f1b"][2],
    )


def test_the_b200_figures_the_fidelity_page_quotes_are_the_benchmarks():
    """``python benchmarks/measured_b200.py`` (about a second): its summary, and the spread
    of each kind of layout's error, as the tightest whole percentages around them."""
    text = printed("measured_b200.py", [])
    step = re.search(
        r"Step time: pipesim mean \|err\| ([\d.]+%), bias ([-+][\d.]+%), worst ([\d.]+%); SimuMax mean \|err\| ([\d.]+%)", text
    )
    memory = re.search(
        r"Peak allocated memory: pipesim mean \|err\| ([\d.]+%), bias -[\d.]+%; SimuMax mean \|err\| ([\d.]+%)", text
    )
    shown = quoted(
        "fidelity.md",
        r"Step time: pipesim's mean \|error\| is ([\d.]+%) \(bias ([-+][\d.]+%), worst ([\d.]+%)\) against SimuMax's ([\d.]+%); "
        r"peak allocated memory ([\d.]+%) low against SimuMax's ([\d.]+%)",
    )
    assert shown == step.groups() + memory.groups()
    kinds: dict[str, list[float]] = {"pure pipeline": [], "CP": [], "tensor-parallel": [], "MoE": []}
    for layout, error in re.findall(r"^\| \w+ \| ([^|]+) \| [\d.]+ \| [\d.]+ \| [\d.]+ \| ([-+][\d.]+)% \|", text, re.M):
        kind = (
            "MoE"
            if " ep" in layout
            else "CP"
            if " cp" in layout
            else "pure pipeline"
            if layout.startswith("tp1 ")
            else "tensor-parallel"
        )
        kinds[kind].append(abs(float(error)))
    assert sum(map(len, kinds.values())) == 43
    spread = quoted(
        "fidelity.md",
        r"the pure pipeline cases are (\d+)-(\d+)% fast and the CP cases (\d+)-(\d+)%, the tensor-parallel ones (\d+)-(\d+)% and the MoE ones (\d+)-(\d+)%",
    )
    assert [int(x) for x in spread] == [f(g(kinds[k])) for k in kinds for f, g in ((math.floor, min), (math.ceil, max))]


def test_the_a100_figures_the_fidelity_page_quotes_are_the_benchmarks():
    """``python benchmarks/measured_a100.py`` (about a second): the step and memory summary,
    the three passes, the 22B layer, and each schedule's speed-up and memory figures."""
    text = printed("measured_a100.py", [])
    step = re.search(
        r"Step time: mean \|err\| ([\d.]+%), bias ([-+][\d.]+%), worst ([\d.]+%)\. Peak memory: mean \|err\| ([\d.]+%)", text
    )
    shown = quoted(
        "fidelity.md",
        r"step time within ([\d.]+%) on average \(bias ([-+][\d.]+%), worst ([\d.]+%)\), peak memory within ([\d.]+%)",
    )
    assert shown == step.groups()
    passes = re.search(r"F: mean \|err\| [\d.]+%, bias ([-+][\d.]+%).*; B: .*bias ([-+][\d.]+%).*; W: .*bias ([-+][\d.]+%)", text)
    f, w, b = quoted("fidelity.md", r"forward ([-+][\d.]+%), weight gradient ([-+][\d.]+%), input gradient ([-+][\d.]+%)")
    assert (f, b, w) == passes.groups()
    layer = re.search(
        r"\| no recompute \| ([\d.]+) \| ([\d.]+) \| ([-+][\d.]+%) \| ([\d.]+) \| ([\d.]+) \| ([-+][\d.]+%) \|", text
    )
    shown = quoted(
        "fidelity.md",
        r"forward ([\d.]+) ms against ([\d.]+) \(([-+][\d.]+%)\), backward ([\d.]+) against ([\d.]+) \(([-+][\d.]+%)\)",
    )
    assert shown == tuple(layer.group(i) for i in (2, 1, 3, 5, 4, 6))
    core = re.search(r"- selective recompute: measured ([\d.]+) ms, pipesim ([\d.]+) ms \(([-+][\d.]+%)\)", text)
    assert (
        quoted("fidelity.md", r"= ([\d.]+) ms\) measures that core .*?: pipesim gives ([\d.]+) ms \(([-+][\d.]+%)\) head by head")
        == core.groups()
    )
    table = (DOCS / "fidelity.md").read_text().split("| schedule | pinned as | speed-up:", 1)[1].split("\n\n", 1)[0]
    for name in ("1F1B-I", "ZB-1p", "ZB-2p"):
        row = re.search(
            rf"^\| {name} \| [^|]+ \| ([\d.]+%) \| ([-+][\d.]+%) \| ([\d.]+%) \| ([\d.]+%) \| ([-+][\d.]+%) \|$", table, re.M
        )
        summary = re.search(
            rf"- {name}: speed-up: mean \|err\| ([\d.]+%), bias ([-+][\d.]+%), worst ([\d.]+%); memory: mean \|err\| ([\d.]+%), bias ([-+][\d.]+%)",
            text,
        )
        assert row and row.groups() == summary.groups(), name


def test_pipesims_side_of_the_calculon_comparison_is_the_benchmarks():
    """``python benchmarks/peer_calculon.py`` without a Calculon checkout prints pipesim's
    side alone (under a second); Calculon's figures need its source and are not checked."""
    line = re.search(
        r"pipesim: +mean \|error\| ([\d.]+%), worst ([-+][\d.]+%), bias \(mean signed\) ([-+][\d.]+%)",
        printed("peer_calculon.py", []),
    )
    assert quoted("fidelity.md", r"pipesim ([\d.]+%) \(worst ([-+][\d.]+%), bias ([-+][\d.]+%)\)") == line.groups()


def test_the_slowest_gpu_figures_are_the_stragglers_models():
    """fidelity.md's slowdown at 8 and 8192 GPUs, at the cluster files' default spread."""
    sd = next(f.default for f in fields(Cluster) if f.name == "gpu_speed_sd")
    at8, at8192 = quoted("fidelity.md", r"maximum of N normal draws: ([\d.]+)% at 8 GPUs, ([\d.]+)% at 8192")
    assert (at8, at8192) == tuple(f"{100 * (1 - slowest_share(n, sd)):.1f}" for n in (8, 8192))


def test_the_fuzz_run_the_architecture_page_describes_is_the_scripts_default():
    cases = re.search(r'"--cases", type=int, default=([\d_]+)', (pages.ROOT / "benchmarks" / "fuzz.py").read_text())
    assert cases, "benchmarks/fuzz.py no longer sets --cases' default where this test reads it"
    shown = quoted("architecture.md", r"`python benchmarks/fuzz.py` runs ([\d,]+) hostile command lines")[0]
    assert int(shown.replace(",", "")) == int(cases.group(1))


# --- the summary atop docs/fidelity.md ------------------------------------------------------------


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_fidelity_summary_quotes_its_sections():
    """Each row of the table atop docs/fidelity.md links a section of the page, each figure
    its last column gives is one that section states (the sections' own figures are held to
    the benchmarks above), and each file it names exists; every link inside the page
    names one of its headings."""
    text = (DOCS / "fidelity.md").read_text()
    head, *parts = re.split(r"^## ", text, flags=re.M)
    sections = {slug(part.split("\n", 1)[0]): pages.squeeze(part) for part in parts}
    rows = [line for line in head.splitlines() if line.startswith("| [")]
    assert len(rows) == len(sections), "a section of docs/fidelity.md has no row in the table atop it, or a row no section"
    for row in rows:
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]
        anchor = re.match(r"\[[^]]+\]\(#([\w-]+)\)$", cells[0])
        assert anchor and anchor.group(1) in sections, f"{cells[0]} names no section of the page"
        section = sections[anchor.group(1)]
        for figure in re.findall(r"(?<![\w.])[-+]?\d[\d,.]*%?x?", cells[-1]):
            figure = figure.rstrip(".,")
            assert re.search(rf"(?<![\w.]){re.escape(figure)}(?![\d])", section), f"{anchor.group(1)} does not state {figure}"
        for path in re.findall(r"`([\w/]+\.py)`", row):
            assert (pages.ROOT / path).exists() or (pages.ROOT / "src" / "pipesim" / path).exists(), path
    headings = {slug(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}
    for anchor in re.findall(r"\]\(#([^)]+)\)", text):
        assert anchor in headings, f"docs/fidelity.md links #{anchor}, which no heading makes"
