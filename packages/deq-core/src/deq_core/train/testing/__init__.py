"""A test kit for tasks trained on :mod:`deq_core.train`'s skeleton (deq-core's own, the task packages', a user's):
it checks from outside that a task keeps the skeleton's promises. Nothing in :mod:`deq_core.train` imports it, and no
training code has a hook for it.

- :mod:`~deq_core.train.testing.faults`: faults made where the training code cannot see them: a process killed at a
  step of a checkpoint save or at a random moment, then resumed; a folder that cannot be written, a full device, a
  planted pickle, damaged weights, an edited config, a planted solver module; and the checks that a task's command
  lines answer each of them in one line.
- :mod:`~deq_core.train.testing.trackers`: a run's TensorBoard files read back and compared with its metrics.jsonl
  (needs ``tensorboard``).
- :mod:`~deq_core.train.testing.hub`: a stand-in for the Hugging Face Hub (``HfApi.create_repo`` / ``upload_folder``
  replaced, the uploads kept in a local cache) for tests of ``push_to_hub`` and ``from_pretrained`` without network
  (needs ``deq-core[hub]``).
"""

from __future__ import annotations

__all__: list[str] = []
