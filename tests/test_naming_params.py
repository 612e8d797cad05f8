"""The plan's parameter counts in words: Kimi K2's 1,026,408,232,448 weights (Fireworks'
paramCount, docs/models.md) were printed "1.03e+03B"."""

from pipesim.planner.naming import fmt_params


def test_counts_take_the_unit_that_keeps_three_figures():
    assert fmt_params(1_026_408_232_448) == "1.03T"
    assert fmt_params(671_026_279_424) == "671B"
    assert fmt_params(15_706_484_224) == "15.7B"
    assert fmt_params(302_000_000) == "302M"
    assert fmt_params(999_960_000_000) == "1T"  # rounds up a unit, never "1e+03B"
