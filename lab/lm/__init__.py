"""deq-lm's lab: the claims at CPU scale (DEQ paper Tables 1-4, JR paper Table 1), not installed with deq-lm.

- :mod:`lab.lm.claims`: the claims, their published numbers, the thresholds fixed before the runs, the verdicts and
  the figure.
- :mod:`lab.lm.copy400`: the copy-memory rows at T = 400 (Table 1): runs, thresholds, rows and figure.
- :mod:`lab.lm.reproduce`: trains (or reads) the claims runs and writes ``claims.md``, ``claims.json``,
  ``ppl_vs_nfe.png`` and ``copy400_loss.png``.
- :mod:`lab.lm.step_timing`: training and inference steps of several models timed interleaved in one process (the
  speed and runtime claims).

From the repository's root::

    python -m lab.lm claims --output-dir OUT [--data-dir CORPUS] [--seeds 0 1 2] [--quick] [--finished-only]
    python -m lab.lm commands | plan --output-dir OUT [--data-dir CORPUS]
    python -m lab.lm restore --from packages/deq-lm/results/claims/run_logs --output-dir OUT
"""
