"""This repository's own lab: what its reports, claims runs and tests use, never installed with a package.

- :mod:`lab.claims`: claims tables (a threshold fixed before the runs, the paper's number, ours, the verdict).
- :mod:`lab.steptime`: where a DEQ training step's time goes (inside f or outside it), for the profile benchmarks.
- :mod:`lab.faults`: fault injection for the tests of training scripts (SIGKILL at save points, planted files,
  read-only folders); nothing in the packages calls it.
- :mod:`lab.vision`: deq-vision's claims (the JR paper's vision claims at CPU scale): ``python -m lab.vision claims
  --output-dir OUT``.

Run from the repository's root (``python -m lab...``); the packages' tests find it through their pytest
``pythonpath``, the benchmarks through nox's bench session.
"""
