"""The ``pipesim`` command line.

Every command is a thin layer over the library: parse flags, call build/simulate/...,
print. Bad input of any kind ends in one line on stderr naming what is wrong and what
would be right, and exit status 2; nothing is written when a command fails.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
import tempfile
from collections.abc import Sequence

from .errors import PipesimError
from .parser import make_parser

#: the pip extra that brings each optional import (a missing one is a one-line hint)
EXTRAS = {"matplotlib": "plot", "torch": "torch", "numpy": "torch", "ortools": "exact"}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    what = f"pipesim {argv[0]}" if argv and not argv[0].startswith("-") else "pipesim"
    try:
        parser = make_parser(argv)  # inside: a Ctrl-C while the commands import is one line too
        parser.typed = argv
        args = parser.parse_args(argv)
        args.argv = argv  # as typed, for reports that say how to reproduce them
        if not getattr(args, "run", None):
            raise PipesimError("no command given; give one, e.g. pipesim simulate -s 1f1b (see 'pipesim --help')")
        check_args(args)
        code = args.run(args) or 0
        for note in getattr(args, "notes", ()) if code == 0 else ():  # what a command changed of the input, and why
            print(note, file=sys.stderr)
        return code
    except PipesimError as e:
        print(f"pipesim: error: {e}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        if top not in EXTRAS:
            raise
        print(f"pipesim: error: {what} needs {top}: pip install 'pipesim[{EXTRAS[top]}]'", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"pipesim: interrupted: {what} stopped by Ctrl-C (no file is left half-written)", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (pipesim ... | head): not an error
        _drop_stdout()
        return 0
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO):
            raise
        # stdout on a full disk or /dev/full (files pipesim writes say so themselves)
        _drop_stdout()
        print(f"pipesim: error: {what} cannot write its output: {e.strerror}", file=sys.stderr)
        return 1


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush of what could not
    be written does not print a second error."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def check_args(args: argparse.Namespace) -> None:
    """Checks every command shares, before any work: no flag given an empty value, and
    no output that would replace one of the command's inputs."""
    for key, value in vars(args).items():
        for v in value if isinstance(value, list) else [value]:
            if v == "":
                raise PipesimError(f"--{key.replace('_', '-')} '' is empty; give a value (see 'pipesim {args.argv[0]} --help')")
    written = getattr(args, "output_flags", ("output",))
    outputs = [
        ("-o" if k == "output" else "--" + k.replace("_", "-"), v) for k in written for v in _listed(getattr(args, k, None))
    ]
    seen: dict[str, str] = {}
    for flag, out in outputs:  # one file named twice would be written twice, the first copy lost
        key = os.path.realpath(out) if out != "-" else ""
        if key in seen:
            first = seen[key]
            said = "is given twice" if first == f"{flag} {out}" else f"names the file {first} writes too"
            raise PipesimError(f"{flag} {out} {said}; give each output its own file")
        if key:
            seen[key] = f"{flag} {out}"
    # here, not at the top: files reads schedules (ir, numpy), which --version and --help,
    # which end in parse_args, never need
    from .files import input_files, output_target, refuse_overwrite

    for flag, out in outputs:
        target = output_target(out)  # a device, FIFO, folder or missing folder: refused before any work
        if target is not None:
            _probe_writable(flag, out, target)
    refuse_overwrite(outputs, input_files(vars(args), skip=(*written, "argv"), positional=getattr(args, "positional", ())))


def _probe_writable(flag: str, name: str, target) -> None:
    """Create and remove a temporary file beside ``target``, as the atomic writer will, so
    a folder that refuses files (no permission, a read-only or virtual file system) is
    named before a search that may run for minutes, not after it."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".probe", dir=target.parent)
    except OSError as e:
        raise PipesimError(
            f"cannot write {name!r}: {e.strerror} (in {str(target.parent)!r}); give {flag} a file in a folder you can write"
        ) from None
    os.close(fd)
    os.unlink(tmp)


def _listed(value) -> list[str]:
    return [v for v in (value if isinstance(value, list) else [value]) if isinstance(v, str)]


if __name__ == "__main__":
    sys.exit(main())
