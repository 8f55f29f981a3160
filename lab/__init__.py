"""This repository's own lab: what its reports, claims runs and tests use, never installed with a package.

- :mod:`lab.claims`: claims tables (a threshold fixed before the runs, the paper's number, ours, the verdict).
- :mod:`lab.steptime`: where a DEQ training step's time goes (inside f or outside it), for the profile benchmarks.
- :mod:`lab.lm`, :mod:`lab.toy`, :mod:`lab.vision`: each task package's claims runs and their tables (a paper's claims
  at CPU scale): ``python -m lab.lm claims --output-dir OUT`` (the same for toy and vision; ``--quick`` for a smoke
  run), with the results committed under ``packages/deq-X/results/claims/``.

Run from the repository's root (``python -m lab...``). No package's tests import it: the repository's own tests
(``tests/``) find it through the root ``pytest.ini``; the step-profile benchmarks put the checkout's root on
``sys.path`` themselves.
"""
