"""What the training scripts of the task packages (deq-toy, deq-lm, deq-vision) share; installed with the extra
``pip install 'deq-core[train]'`` and never imported by ``import deq_core``.

A task author imports from the package itself (``from deq_core.train import Task, train, ...``); ``__all__`` lists
those names, what a task package's training script and config module use:

- the skeleton: :class:`Task` (what a task supplies), :class:`Parts` and :class:`Forward` (what it returns),
  :class:`StepSchedule` (what the skeleton hands to it each step) and :func:`train`;
- the config: the ``run``, ``optim`` and ``deq`` sections (:class:`RunConfig`, :class:`OptimConfig`,
  :class:`DEQConfig`, built with :func:`section` and :func:`deq_section`; :func:`deq_settings` for
  presets), their checks (``check_*``, :func:`in_section`), :func:`replace_config` and
  :func:`apply_overrides` (``key=value`` changes);
- the command line: :func:`training_parser`, :func:`run_training_cli`, :func:`check_count`, :func:`set_threads` and
  :class:`UsageError` (one line, exit status 2);
- :func:`cosine_lr_factor`, the learning-rate schedule the task packages share.

The rest (evaluation and export tools, run folders, checkpoints, files) is imported from its module. One job per
module:

- :mod:`~deq_core.train.trainer`, :mod:`~deq_core.train.task`: the training skeleton (:func:`trainer.train`) and what
  a task supplies to it (:class:`task.Task`; its settings are the config's ``run``, ``optim`` and ``deq`` sections).
- :mod:`~deq_core.train.schedules`: Jacobian-regularization and pretraining schedules, the jittered iteration limit, the
  cosine learning-rate factor.
- :mod:`~deq_core.train.overrides`: ``key=value`` command-line overrides of a config dataclass.
- :mod:`~deq_core.train.checks`: validation of a training config (one-line errors naming the key).
- :mod:`~deq_core.train.deq_config`: :class:`~deq_core.train.deq_config.DEQConfig`, the ``deq`` section of every task
  config (the layer's solvers, limits, backward mode; jitter, pretraining and Jacobian schedules).
- :mod:`~deq_core.train.metrics`: the ``metrics.jsonl`` file of a run.
- :mod:`~deq_core.train.trackers`: what experiment trackers (``run.log_with``: TensorBoard, W&B, ...) get from a run.
- :mod:`~deq_core.train.launch`: the launcher's mixed precision against the config's; the process-group timeout and
  the line naming the ranks that stopped answering.
- :mod:`~deq_core.train.progress`: whether to draw a progress bar.
- :mod:`~deq_core.train.checkpoints`: checkpoint folders written aside and renamed, read as tensors and plain data.
- :mod:`~deq_core.train.state`, :mod:`~deq_core.train.rng`: a training run's checkpoint (step, state dicts, weights,
  random generators).
- :mod:`~deq_core.train.rundir`: the run folder's lock; refusing to train over a run or to resume nothing.
- :mod:`~deq_core.train.run_config`: the run's ``config.json``, nested configs from dicts and dotted changes, and the
  resume check.
- :mod:`~deq_core.train.reports`, :mod:`~deq_core.train.plots`: Markdown tables and the training plot.
- :mod:`~deq_core.train.trust`: which solver import paths a config read from a file may name (``--trust-solver``).
- :mod:`~deq_core.train.errors`: :class:`UsageError`, what a command-line tool reports in one line with exit status 2.
- :mod:`~deq_core.train.files`: every output written aside and renamed, never through a symbolic link; a failure to
  write is one line (:class:`~deq_core.train.files.OutputError`).
- :mod:`~deq_core.train.cli`: the command-line options the packages share (``--threads``, ``--max-iters``,
  ``--trust-solver``, the benchmarks' ``--device``) and their one-line errors.
- :mod:`~deq_core.train.hub`: a trained model's ``save_pretrained`` / ``from_pretrained`` / ``push_to_hub`` (Hugging
  Face Hub); needs the extra ``pip install 'deq-core[hub]'`` too.
- :mod:`~deq_core.train.testing`: a test kit that checks a task from outside (faults, tracker files read back).
"""

from __future__ import annotations

from importlib.util import find_spec

# The distributions of the extra ``deq-core[train]`` (packages/deq-core/pyproject.toml), by import name: checked before
# any module of the package is imported.
_EXTRA = ("accelerate", "safetensors", "tqdm", "matplotlib", "omegaconf")

_missing = [name for name in _EXTRA if find_spec(name) is None]
if _missing:
    raise ImportError(
        f"deq_core.train needs {', '.join(_missing)}, which `pip install deq-core` does not install: "
        "pip install 'deq-core[train]'"
    )

from .checks import check_at_least, check_choice, check_finite, check_fraction, check_seed, in_section  # noqa: E402
from .cli import check_count, run_training_cli, set_threads, training_parser  # noqa: E402
from .deq_config import DEQConfig, deq_section, deq_settings  # noqa: E402
from .errors import UsageError  # noqa: E402
from .overrides import apply_overrides  # noqa: E402
from .run_config import replace_config  # noqa: E402
from .schedules import cosine_lr_factor  # noqa: E402
from .sections import OptimConfig, RunConfig, section  # noqa: E402
from .task import Forward, Parts, StepSchedule, Task  # noqa: E402
from .trainer import train  # noqa: E402

__all__ = [
    "DEQConfig",
    "Forward",
    "OptimConfig",
    "Parts",
    "RunConfig",
    "StepSchedule",
    "Task",
    "UsageError",
    "apply_overrides",
    "check_at_least",
    "check_choice",
    "check_count",
    "check_finite",
    "check_fraction",
    "check_seed",
    "cosine_lr_factor",
    "deq_section",
    "deq_settings",
    "in_section",
    "replace_config",
    "run_training_cli",
    "section",
    "set_threads",
    "training_parser",
    "train",
]
