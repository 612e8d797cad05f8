"""Run every command that README.md and docs/*.md show, and check what they quote.

A page is checked block by block, in order, in one fresh folder (so a command may read the
file an earlier one wrote) that links the repository's ``tests/data`` (the example files a
page may name, as a user in a clone would):

- a fenced block whose lines start with ``pipesim``, ``python``, ``make``, ``pip``, ``torchrun`` or
  ``$ `` holds commands
  (a trailing ``\\`` continues a line, ``# ...`` is a comment); each must exit 0, or 2
  where the page shows it printing ``pipesim: error: ...``.
  After ``$ COMMAND``, the lines up to the next ``$`` are what it prints: each one shown
  must appear, in that order, among the lines it prints now (spaces squeezed; a line
  ``...`` stands for lines left out, a line ending in ``...`` for one that goes on);
- ``<!-- quoted: TEXT; TEXT -->`` after a block names figures the prose quotes from it:
  each TEXT must appear in the prose and in what the block above printed;
- a ``python`` block runs as a script, or as a doctest when its first line starts ``>>>``
  (what it shows printing must be what it prints);
- a block that must not run here (``make run``, GPU-only, or a benchmark taking minutes)
  is preceded by a line ``*Not run by the docs test: REASON.*`` (or, where the page must open
  with the block itself, the comment ``<!-- not run by the docs test: REASON. -->``).

``pipesim`` and ``python -m pipesim`` run in this process (no interpreter start per
command); ``$(pipesim ...)`` inside a command is replaced by what that command prints.

    python docs/pages.py [PAGE ...]     # check the pages (default: README.md and docs/*.md)
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOT_RUN = re.compile(r"^(?:\*Not run by the docs test: (.+)\.\*|<!-- not run by the docs test: (.+)\. -->)$")
QUOTED = re.compile(r"^<!-- quoted: (.+) -->$")
STARTS = ("pipesim ", "python ", "make ", "pip ", "torchrun ", "$ ")


def pages() -> list[Path]:
    """README.md and every docs/*.md page, whoever wrote it."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@dataclass
class Command:
    line: int
    text: str  # as the page writes it, continuation lines joined
    shown: list[str] | None  # what the page says it prints (after $), or None


@dataclass
class Block:
    line: int
    kind: str  # "commands" or "python"
    commands: list[Command] = field(default_factory=list)
    source: str = ""
    not_run: str | None = None
    quoted: list[str] = field(default_factory=list)


def parse(text: str) -> tuple[list[Block], str]:
    """The page's runnable blocks, and its prose (the text outside every fence)."""
    lines = text.splitlines()
    blocks: list[Block] = []
    prose: list[str] = []
    i = 0
    last_text = ""
    while i < len(lines):
        line = lines[i]
        if not line.startswith("```"):
            q = QUOTED.match(line.strip())
            if q and blocks:
                blocks[-1].quoted += [t.strip() for t in q.group(1).split(";") if t.strip()]
            if not q:  # the marker names what the prose quotes; counted as prose it would find itself
                prose.append(line)
            if line.strip():
                last_text = line.strip()
            i += 1
            continue
        info = line[3:].strip()
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        body = lines[i + 1 : j]
        marker = NOT_RUN.match(last_text)
        if info == "python":
            blocks.append(
                Block(i + 1, "python", source="\n".join(body) + "\n", not_run=marker and (marker.group(1) or marker.group(2)))
            )
        elif info in ("", "sh", "console") and any(b.startswith(STARTS) for b in body):
            blocks.append(
                Block(i + 1, "commands", _commands(body, i + 2), not_run=marker and (marker.group(1) or marker.group(2)))
            )
        last_text = ""
        i = j + 1
    return blocks, "\n".join(prose)


def _commands(body: list[str], first: int) -> list[Command]:
    out: list[Command] = []
    k = 0
    while k < len(body):
        line, at = body[k], first + k
        if line.startswith(STARTS):
            text = line.removeprefix("$ ")
            while text.rstrip().endswith("\\") and k + 1 < len(body):
                k += 1
                text = text.rstrip()[:-1] + " " + body[k].strip()
            out.append(Command(at, text, [] if line.startswith("$ ") else None))
        elif out and out[-1].shown is not None:
            out[-1].shown.append(line)
        elif line.strip() and not line.lstrip().startswith("#"):
            raise ValueError(f"line {at}: {line!r} is neither a command nor the output of a $ command")
        k += 1
    return out


def pipesim(argv: list[str]) -> tuple[int, str, str]:
    """``pipesim ARGV`` in this process: exit status, stdout, stderr."""
    from pipesim.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # --help, --version
            code = e.code if isinstance(e.code, int) else 0
    return code, out.getvalue(), err.getvalue()


def run_command(text: str) -> tuple[int, str, str]:
    argv = shlex.split(_substituted(text), comments=True)
    if argv[0] == "pipesim":
        return pipesim(argv[1:])
    if argv[:3] == ["python", "-m", "pipesim"]:
        return pipesim(argv[3:])
    if argv[0] == "python":
        # the pipesim this checker runs, for scripts too (this tree's src/ before an installed one)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
        done = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, cwd=os.getcwd(), env=env)
        return done.returncode, done.stdout, done.stderr
    raise ValueError(f"{text}: only pipesim and python commands run here; mark the block not run")


def _substituted(text: str) -> str:
    """``$(pipesim ...)`` replaced by what that command prints, as a shell would."""

    def output(m: re.Match) -> str:
        code, out, err = run_command(m.group(1))
        if code:
            raise AssertionError(f"$({m.group(1)}) failed ({code}): {err.strip()}")
        return " ".join(out.split())

    return re.sub(r"\$\((pipesim [^)]*)\)", output, text)


def squeeze(line: str) -> str:
    return " ".join(line.split())


def missing(shown: list[str], printed: str) -> str | None:
    """The first shown line not found (in order) among the printed ones, or None."""
    have = [squeeze(x) for x in printed.splitlines()]
    at = 0
    for line in shown:
        want = squeeze(line)
        if not want or want == "...":
            continue
        # a shown line ending in "..." stands for every printed line that starts like it
        found = [
            i
            for i in range(at, len(have))
            if have[i] == want or (want.endswith("...") and have[i].startswith(want[:-3].rstrip()))
        ]
        if not found:
            return line
        at = found[0] + 1
    return None


def _doctest(source: str) -> tuple[int, str]:
    """Run ``source`` as a doctest in this process: failures, and the report or the output."""
    import doctest

    test = doctest.DocTestParser().get_doctest(source, {}, "page", None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    out = io.StringIO()
    runner.run(test, out=out.write)
    return runner.failures, out.getvalue() or "".join(e.want for e in test.examples)


def check(page: Path) -> list[str]:
    """What is wrong with ``page``: one line per failed command, stale output or quote."""
    blocks, prose = parse(page.read_text())
    problems: list[str] = []
    name = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
    home = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="pipesim-page-") as tmp:
        os.chdir(tmp)
        Path("tests").mkdir()
        Path("tests/data").symlink_to(ROOT / "tests" / "data")
        try:
            for b in blocks:
                if b.not_run:
                    continue
                printed = ""
                if b.kind == "python" and b.source.startswith(">>>"):
                    failed, out = _doctest(b.source)
                    if failed:
                        problems.append(
                            f"{name}:{b.line}: the doctest block no longer prints what it shows: {out.strip()[-300:]}"
                        )
                    printed = out
                elif b.kind == "python":
                    Path("snippet.py").write_text(b.source)
                    code, out, err = run_command("python snippet.py")
                    if code:
                        problems.append(f"{name}:{b.line}: the python block failed ({code}): {err.strip()[-300:]}")
                    printed = out
                for c in b.commands:
                    code, out, err = run_command(c.text)
                    printed += out + err
                    # a $ command whose shown output is a pipesim error is shown failing: exit 2
                    expect = 2 if any(x.startswith("pipesim: error:") for x in c.shown or []) else 0
                    if code != expect:
                        problems.append(f"{name}:{c.line}: {c.text} exited {code}, not {expect}: {err.strip()[-300:]}")
                    elif c.shown and (gone := missing(c.shown, out + err)) is not None:
                        problems.append(f"{name}:{c.line}: {c.text} no longer prints {gone.strip()!r}")
                for q in b.quoted:
                    if squeeze(q) not in squeeze(prose):
                        problems.append(f"{name}:{b.line}: quoted {q!r} is not in the page's prose")
                    if squeeze(q) not in squeeze(printed):
                        problems.append(f"{name}:{b.line}: the prose quotes {q!r}, which the block above no longer prints")
        finally:
            os.chdir(home)
    return problems


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    todo = [Path(p).resolve() for p in sys.argv[1:]] or pages()
    found = [p for page in todo for p in check(page)]
    print("\n".join(found) or f"every command of {len(todo)} pages runs and prints what the page quotes")
    sys.exit(1 if found else 0)
