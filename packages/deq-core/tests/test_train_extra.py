"""``import deq_core`` stays torch-only: it loads no training code (``deq_core.train``) nor what that code needs; and
``import deq_core.train`` without its extra fails with one line saying how to install it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_import_deq_core_loads_no_training_code() -> None:
    # torch itself imports tqdm when it is installed (torch.hub): the modules deq_core adds to torch's are checked.
    code = (
        "import sys, torch\n"
        "before = set(sys.modules)\n"
        "import deq_core\n"
        "added = sorted(set(sys.modules) - before)\n"
        "training = ('accelerate', 'matplotlib', 'tqdm', 'safetensors', 'huggingface_hub')\n"
        "print([m for m in added if m.startswith('deq_core.train') or m.split('.')[0] in training])\n"
    )
    result = _python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", f"import deq_core loaded {result.stdout.strip()}"


def test_train_without_its_extra_says_how_to_install_it() -> None:
    # sys.modules[name] = None makes `import name` fail and find_spec(name) return None, as when it is not installed.
    code = (
        "import sys\n"
        "sys.modules['accelerate'] = None\n"
        "try:\n"
        "    import deq_core.train\n"
        "except ImportError as err:\n"
        "    print(err)\n"
        "else:\n"
        "    print('imported')\n"
    )
    result = _python(code)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1 and "accelerate" in lines[0] and "pip install 'deq-core[train]'" in lines[0], lines


def test_train_with_its_extra_imports() -> None:
    result = _python("import deq_core.train.checkpoints, deq_core.train.schedules; print('ok')")
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_user_errors_share_one_base_and_stay_value_errors() -> None:
    from deq_core.train.checkpoints import CheckpointError
    from deq_core.train.errors import UsageError
    from deq_core.train.run_config import ResumeConfigError
    from deq_core.train.rundir import RunDirError

    for error in (CheckpointError, RunDirError, ResumeConfigError):
        assert issubclass(error, UsageError) and issubclass(error, ValueError), error


def test_package_exports_what_a_task_author_uses() -> None:
    import deq_core.train as train_package
    from deq_core.train import task, trainer

    assert len(train_package.__all__) == len(set(train_package.__all__))
    for name in train_package.__all__:
        value = getattr(train_package, name)
        assert value.__module__.startswith("deq_core.train."), (name, value.__module__)
    assert (train_package.Task, train_package.StepSchedule, train_package.train) == (
        task.Task, task.StepSchedule, trainer.train
    )  # fmt: skip
