"""deq-vision's lab: the JR paper's vision claims at CPU scale (16x16 glyphs, MDEQ vs MDEQ + JR vs a ResNet twin).

- :mod:`lab.vision.claims`: the claims (thresholds fixed before the runs), their verdicts, the NFE convention, the
  hard-stop table and the residual-over-training figure.
- :mod:`lab.vision.reproduce`: the runs the claims need, their evaluation and the command line.

From the root of a checkout::

    python -m lab.vision claims --output-dir OUT [--seeds 0 1 2] [--quick]   # train what is missing, write claims.md
    python -m lab.vision commands --output-dir OUT                             # one training command per run
    python -m lab.vision restore --from packages/deq-vision/results/claims --output-dir OUT   # the committed runs
"""
