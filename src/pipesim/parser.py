"""The ``pipesim`` argument parser: one-line errors with a did-you-mean, and the commands
of every module in ``COMMANDS``."""

from __future__ import annotations

import argparse
import importlib
import re
from collections.abc import Callable, Sequence

from .errors import PipesimError


class Parser(argparse.ArgumentParser):
    """argparse, but an error is one line and exit status 2 (argparse prints usage too), and
    a command, choice or flag one edit away from a real one gets a did-you-mean."""

    typed: list[str] = []  # the command line, set by main: which command's flags to suggest from

    def __init__(self, *args, **kwargs) -> None:
        # No abbreviated long flags (argparse takes --mic for --microbatches by default): a
        # script that abbreviates would start failing, or mean another flag, the day a
        # command gains a flag with the same prefix. Sub-parsers are this class too.
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
        # a flag that takes one value keeps the last of two (--pp 2 --pp 4 ran pp 4): refused
        # instead; append flags (draw -o, sweep -o) are meant to repeat and stay as they are
        self.register("action", None, _GivenOnce)
        self.register("action", "store", _GivenOnce)

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        namespace, extras = super().parse_known_args(args, namespace)
        namespace.__dict__.pop(_GivenOnce.SEEN, None)  # _GivenOnce's record, not a flag
        return namespace, extras

    def error(self, message: str) -> None:  # type: ignore[override]
        hint = self._suggestion(message)
        if hint:  # the one likely meant rather than the whole list of choices
            message = message.split(" (choose from ")[0]
        raise PipesimError(f"{message}{hint} (see '{self._help_of()} --help')")

    def _help_of(self) -> str:
        """The command whose help answers the error: argparse reports a command's unknown
        flags from the top parser, whose help lists only the commands."""
        if self._subparsers and self.typed and self.typed[0] in self._subparsers._group_actions[0].choices:
            return f"{self.prog} {self.typed[0]}"
        return self.prog

    def _suggestion(self, message: str) -> str:
        bad = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if bad:
            return did_you_mean_one_edit(bad.group(1), re.findall(r"'([^']*)'", bad.group(2)))
        unknown = re.match(r"unrecognized arguments: (.*)", message)
        command = self._subparsers._group_actions[0].choices.get(self.typed[0]) if self._subparsers and self.typed else None
        missing = re.match(r"the following arguments are required: (.*)", message)
        switch = re.match(r"argument (--[\w-]+): ignored explicit argument", message)
        if switch and self.typed and (said := SWITCHES_OF_FILE_FLAGS.get((self.typed[0], switch.group(1)))):
            return f"; {said}"  # --timeline=tl.json
        if missing and not self._subparsers and self.typed:  # raised by the command's own parser
            # argparse names a missing flag before an unknown one: `simulate --schedules 1f1b`
            # was told --schedule is required, not that it had typed its near-twin
            required = re.findall(r"--[\w-]+", missing.group(1))
            for word in self.typed[1:]:
                flag = word.split("=")[0]
                if flag.startswith("--") and flag not in self._option_string_actions:
                    if hint := did_you_mean_one_edit(flag, required):
                        return f"; {flag} is no flag of {self.typed[0]}{hint}"
        if unknown and command is not None:
            if hint := _switch_given_a_value(self.typed, unknown.group(1).split()):
                return hint
            flags = [f for f in command._option_string_actions if f.startswith("--")]
            for word in unknown.group(1).split():
                if word.startswith("--") and (hint := did_you_mean_one_edit(word.split("=")[0], flags)):
                    return hint
            for word in unknown.group(1).split():
                longer = sorted(f for f in flags if word.startswith("--") and f.startswith(word.split("=")[0]))
                if longer:  # an abbreviation: name the whole flag(s) it could stand for
                    return f" (flags are not abbreviated: did you mean {' or '.join(longer)}?)"
        return ""


# Switches of one command that another command's flag of the same name takes a file for:
# the value typed after the switch is left over as an unrecognized argument, and the hint
# says where the flag that takes it lives.
SWITCHES_OF_FILE_FLAGS = {
    ("run", "--timeline"): "run's --timeline takes no file; pipesim profile DIR --timeline FILE.json writes one",
}


def _switch_given_a_value(typed: Sequence[str], leftovers: Sequence[str]) -> str:
    """The hint "; <where the file goes>" when a switch of SWITCHES_OF_FILE_FLAGS was typed with the
    word after it left over (`run --timeline tl.json`), else ""."""
    for i, word in enumerate(typed[1:-1], start=1):
        said = SWITCHES_OF_FILE_FLAGS.get((typed[0], word))
        if said and typed[i + 1] in leftovers:
            return f"; {said}"
    return ""


class _GivenOnce(argparse._StoreAction):
    """argparse's store, refusing a second value for the same destination: `--pp 2 --pp 4`,
    or an alias and its flag (`--chunks 2 --stages-per-rank 3`), would silently run the last."""

    SEEN = "_pipesim_given_once"  # on the namespace while parsing: dest -> (flag, value)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if option_string is not None:  # a positional is filled once by argparse itself
            seen = namespace.__dict__.setdefault(self.SEEN, {})
            if self.dest in seen:
                flag, first = seen[self.dest]
                second = _shown(values)
                if flag == option_string:
                    said = f"{flag} is given twice ({first}, then {second}); give it once"
                else:  # an alias of the same flag
                    said = f"{flag} {first} and {option_string} {second} are the same flag; give one"
                raise argparse.ArgumentError(None, said)
            seen[self.dest] = (option_string, _shown(values))
        super().__call__(parser, namespace, values, option_string)


def _shown(values) -> str:
    """A flag's parsed value(s) as typed-looking text."""
    return " ".join(map(str, values)) if isinstance(values, list) else str(values)


def did_you_mean_one_edit(word: str, known: Sequence[str]) -> str:
    """ " (did you mean X?)" for the known word one edit away (a letter added, dropped, changed,
    or two neighbours swapped: comapre -> compare), else ""."""
    close = [k for k in known if _edits(word, k) <= 1]
    return f" (did you mean {close[0]}?)" if close else ""


def _edits(a: str, b: str) -> int:
    """Optimal string alignment distance: Levenshtein plus adjacent transpositions."""
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[-1][-1]


def make_parser(argv: Sequence[str] | None = None) -> Parser:
    """The parser of every command; given the command line ``argv``, of the command it
    names only (each command module imports what its flags need: the planner's specs,
    the profile reader, ...), or of none when it names none and asks for no help
    (``pipesim --version``). What a command line prints is the same either way."""
    from . import __version__

    p = Parser(
        prog="pipesim",
        description=(
            "Pipeline-parallel training: generate, check, simulate, compare and draw schedules; plan a run and its "
            "memory per GPU for a model on a cluster (plan, memory); run schedules on torch.distributed (run)."
        ),
    )
    p.add_argument("--version", action="version", version=f"pipesim {__version__}")
    sub = p.add_subparsers(title="commands", parser_class=Parser, metavar="COMMAND")

    def command(name: str, run: Callable, help: str) -> Parser:
        c = sub.add_parser(name, help=help, description=help)
        c.typed = list(argv or ())  # its errors read the command line too (a near-twin of a required flag)
        c.set_defaults(run=run)
        return c

    for module in COMMANDS if argv is None else _modules_for(argv):
        importlib.import_module(module).add_commands(command)
    return p


def _modules_for(argv: Sequence[str]) -> list[str]:
    """The command modules ``argv`` needs: the one holding the command it names; none for
    a line of top-level flags only (--version; no command is an error of its own); all
    for the top-level help, or a word that is no command (the did-you-mean lists them)."""
    word = next((a for a in argv if not a.startswith("-")), None)
    if word is None:
        return list(COMMANDS) if any(a in ("-h", "--help") for a in argv) else []
    held = [module for module, names in COMMANDS.items() if word in names]
    return held or list(COMMANDS)


# The modules that hold the commands, in the order ``pipesim --help`` lists them, each
# with the commands it defines (so that a command line imports its command's module only;
# tests/test_cli_flags.py checks these names against what the modules register). Each
# defines ``add_commands(command)`` and calls ``command(name, run, help)`` (which returns
# the sub-parser) once per command; it imports its heavy dependencies (matplotlib, torch)
# inside ``run`` so that start-up stays fast and the core needs neither.
COMMANDS: dict[str, tuple[str, ...]] = {
    "pipesim.commands.simulate": ("schedules", "simulate"),
    "pipesim.commands.compare": ("compare",),
    "pipesim.commands.order": ("ops", "validate"),
    "pipesim.commands.pair": ("pair",),
    "pipesim.render.commands": ("draw", "sweep", "report"),
    "pipesim.runtime.commands": ("run",),
    "pipesim.runtime.export_import": ("export", "import"),
    "pipesim.planner.commands": ("plan", "memory"),
    "pipesim.profile.commands": ("profile",),
}
