"""deq-toy's lab: the claims table of the synthetic 1D and nested-arithmetic studies, never installed with deq-toy.

- :mod:`lab.toy.claims`: the claims, their thresholds and verdicts, and the runs they need (:mod:`.claims.synthetic`,
  :mod:`.claims.arithmetic`); they train through :func:`deq_toy.runs.ensure_run`, so finished runs are only read.
- :mod:`lab.toy.step_profile`: where one arithmetic training step spends its time (the claims' run-time row).

From the repository's root::

    python -m lab.toy claims --output-dir OUT                  # all groups: OUT/claims.md, OUT/synthetic_ablation.md
    python -m lab.toy claims --output-dir OUT --quick          # the same on tiny data (minutes), not a result
    python -m lab.toy claims --output-dir OUT --claims synthetic   # one group; the others' rows are NOT MEASURED
"""
