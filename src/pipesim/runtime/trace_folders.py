"""Where ``pipesim run --profile`` puts each schedule's traces, checked before the launch.

A refusal here comes before any process starts and leaves nothing behind: the folder is
checked, not made (the ranks make it when they write their traces), so a name the file
system cannot take, a folder two schedules of one list would share, or traces of another
run the profile command would read beside this one's are named now, not after the run.
"""

from __future__ import annotations

import os
import re

from ..errors import PipesimError


def profile_dir(args, schedule, count: int) -> str | None:
    """Where a schedule's traces go: DIR itself for one schedule, DIR/NAME for several."""
    if args.profile is None:
        return None
    folder = args.profile if count == 1 else os.path.join(args.profile, folder_name(schedule.name))
    refuse_unwritable(folder, f"--profile {args.profile}")
    from ..files import input_files, refuse_overwrite

    refuse_overwrite(
        [("--profile", os.path.join(folder, f"rank{r}.json")) for r in range(schedule.pp)],
        input_files(vars(args), skip=("profile", "argv")),  # argv names the folder itself: no input
    )
    _refuse_other_traces(args.profile, folder, schedule.pp)
    if count > 1:
        _refuse_traces_above(args.profile)
    _refuse_unreplaceable(args.profile, folder, schedule.pp)
    return folder


def folder_name(name: str) -> str:
    """A schedule's name as one folder inside DIR: characters a path would read as more
    than a name become _, and so does a name of dots alone (a schedule file named '..'
    put its traces in DIR's parent, beside whatever was there)."""
    safe = re.sub(r"[^\w.-]", "_", name)
    return "_" * max(1, len(safe)) if set(safe) <= {"."} else safe  # and '', which named DIR itself


def refuse_unwritable(folder: str, given: str) -> None:
    """A folder the ranks could not make or write their traces in, refused now (``given``:
    what the user gave, opening the message: ``--profile DIR``). Checked, not made: a
    refusal after this (the model, the ranks, the network) must leave nothing behind, so
    the ranks make the folder when they write their traces."""
    if len(given) > 80:  # a 300-character name, said whole, made the line
        given = f"{given[:40]}...{given[-20:]}"
    existing = folder
    while existing and not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    existing = existing or "."
    if not os.path.isdir(existing):
        where = "" if existing == folder else f"cannot create {folder!r}: "
        raise PipesimError(f"{given}: {where}{existing!r} is not a folder; name a folder for the traces")
    if not os.access(existing, os.W_OK | os.X_OK):
        what = f"the folder {folder!r} is" if existing == folder else f"{existing!r}, where {folder!r} would go, is"
        raise PipesimError(f"{given}: {what} not writable")
    _refuse_uncreatable(given, folder, existing)
    _probe(given, folder, existing)


def _refuse_uncreatable(given: str, folder: str, existing: str) -> None:
    """A folder the ranks could not make, found now rather than after the run (they make
    it when they write their traces): a name longer than the file system takes."""
    try:
        longest = os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError):
        return
    for part in os.path.relpath(folder, existing).split(os.sep) if folder != existing else ():
        if len(os.fsencode(part)) > longest:
            shown = part if len(part) <= 40 else f"{part[:20]}...{part[-8:]}"
            raise PipesimError(
                f"{given}: the folder name {shown!r} is too long ({len(os.fsencode(part))} bytes; "
                f"{existing!r} takes names up to {longest}); give a shorter one"
            )


def _probe(given: str, folder: str, existing: str) -> None:
    """Write where the ranks will write, and take it back. os.access answers yes to root
    whatever the mode, and no to nothing on /proc, /sys or a read-only mount: there the
    ranks failed to make or write the folder after the whole run (exit 1, naming
    '<frozen os>'). A file made in the folder itself, or a folder made in the deepest
    one that exists (the first step of making DIR), is what the ranks will do; both are
    removed at once, so nothing is left behind."""
    import tempfile

    try:
        if existing == folder:
            fd, tmp = tempfile.mkstemp(prefix=".pipesim-probe-", dir=folder)
            os.close(fd)
            os.remove(tmp)
        else:
            os.rmdir(tempfile.mkdtemp(prefix=".pipesim-probe-", dir=existing))
    except OSError as e:
        where = f"the folder {folder!r}" if existing == folder else f"{folder!r} (in {existing!r})"
        raise PipesimError(f"{given}: cannot write traces to {where}: {e.strerror or e}; name a folder you can write") from None


def refuse_shared_folders(flag: str | None, folders: list[str | None], names: list[str]) -> None:
    """Two schedules of one list whose traces would go to one folder (a schedule file named
    zb-h1 beside the registry's zb-h1): the second run's rank files replaced the first's.
    ``flag`` None: the library's jobs (execute_many), each given its own folder."""
    first: dict[str, str] = {}
    for folder, name in zip(folders, names):
        if folder is None:
            continue
        if folder in first:
            if flag is None:  # the library's jobs, each given its folder
                raise PipesimError(
                    f"the jobs of {first[folder]} and {name} would write their traces to one folder, {folder!r}: "
                    "give each job its own profile folder"
                )
            raise PipesimError(
                f"--profile {flag}: {first[folder]} and {name} would write their traces to one folder, {folder!r} "
                "(the schedules have one name): run them in two launches, or rename one in its file"
            )
        first[folder] = name


def _refuse_unreplaceable(flag: str, folder: str, pp: int) -> None:
    """A rank's trace file that is a folder: a rank renames its trace over it after the
    whole run, which fails (IsADirectoryError, exit 1) while the other ranks' traces are
    written, a run half-saved. Named now. (A file, a FIFO or a link is replaced.)"""
    for r in range(pp):
        path = os.path.join(folder, f"rank{r}.json")
        if os.path.isdir(path) and not os.path.islink(path):
            raise PipesimError(
                f"--profile {flag}: {path!r} is a folder, where rank {r}'s trace goes; move it away or give another folder"
            )


def _refuse_other_traces(flag: str, folder: str, pp: int) -> None:
    """A trace in ``folder`` that this run will not replace (rank5.json beside a pp=2
    run, rank0.json.gz): ``pipesim profile`` reads every rank file of the folder, so it
    would sit beside this run's. Named now, before the run, and left where it is: the
    user's to move or remove. This run's own rank files are replaced, as -o replaces.
    Other files (a --timeline tl.json written there) are never read beside rank files:
    they were refused too, 'read beside its traces', which profile does not do."""
    ours = [f"rank{r}.json" for r in range(pp)]
    other = _traces_in(folder, keep=set(ours), beside=ours)
    if other:
        raise PipesimError(
            f"--profile {flag}: {folder!r} holds {other}, which this pp={pp} run does not write and pipesim profile would "
            "read beside its traces; move them away or give an empty folder"
        )


def _refuse_traces_above(flag: str) -> None:
    """Traces in DIR itself when a list run writes DIR/NAME/ (an earlier one-schedule run
    of ``--profile DIR``): ``pipesim profile DIR`` reads a folder's own traces and looks
    into its folders only when it has none, so it read the earlier run's, unsaid."""
    other = _traces_in(flag)
    if other:
        raise PipesimError(
            f"--profile {flag}: the folder holds {other}, which pipesim profile {flag} would read instead of this "
            "run's traces (a folder per schedule inside it, read only where the folder holds none); move them away or "
            "give another folder"
        )


def _traces_in(folder: str, keep: frozenset[str] | set[str] = frozenset(), beside: list[str] | tuple[str, ...] = ()) -> str:
    """The files directly in ``folder`` that ``pipesim profile`` would read once
    ``beside`` are written there, other than ``keep``, named for a message ('' for none)."""
    if not os.path.isdir(folder):
        return ""
    from ..profile.trace import read_in_folder

    names = [e.name for e in os.scandir(folder) if e.is_file()]
    other = sorted(n for n in read_in_folder(names + list(beside)) if n not in keep)
    return ", ".join(other[:3]) + (f" and {len(other) - 3} more" if len(other) > 3 else "")
