"""The schedule families' names and the builder options each takes, as plain data.

The command line's help lists them (which schedules take --chunks, the names --schedules
defaults to) before any schedule is built; reading them from ``schedules.REGISTRY``
imported every builder, and numpy with them, to print ``--help``. The registry stays
the one definition of the families: tests/test_family_names.py holds this table equal
to it, name for name and option for option, in its order.
"""

from __future__ import annotations

#: each family of schedules.REGISTRY, in its order, with the keyword options of its
#: builder beyond pp and microbatches
FAMILY_OPTIONS: dict[str, tuple[str, ...]] = {
    "gpipe": (),
    "1f1b": (),
    "interleaved-1f1b": ("chunks", "group_size"),
    "zb-h1": (),
    "zb-h2": (),
    "zb-v": (),
    "v-half": (),
    "v-min": (),
    "zb-auto": ("f", "b", "w", "comm", "memory_limit", "w_memory", "activation_bytes", "exact", "time_limit"),
    "dualpipe": (),
    "dualpipev": (),
    "chimera": (),
    "1f1b-overlap": ("delay_wgrad",),
    "interleaved-1f1b-overlap": ("chunks", "delay_wgrad", "group_size"),
    "looped-bfs": ("chunks",),
    "interleaved-zb": ("chunks",),
    "zbv-torch": (),
}


def takers(option: str) -> list[str]:
    """The families whose builder takes ``option`` (a keyword such as "chunks")."""
    return [name for name, options in FAMILY_OPTIONS.items() if option in options]
