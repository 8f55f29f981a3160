"""The shared config sections (``deq_core.train.sections``): checks naming the dotted key, short names resolved to
their section on the command line and in presets, run folders of flatter layouts read into sections, and the
training skeleton reading its settings from the sections."""

from __future__ import annotations

import dataclasses
import typing
from types import SimpleNamespace

import pytest

from deq_core.train.checks import SEED_LIMIT, check_at_least, check_finite
from deq_core.train.deq_config import DEQConfig, deq_section
from deq_core.train.overrides import apply_overrides
from deq_core.train.run_config import RUN_RESUMABLE, config_from_dict, replace_config, resolve_key
from deq_core.train.sections import OptimConfig, RunConfig, section
from deq_core.train.task import Task
from deq_core.train.trainer import Run, run_steps, schedule_at


@dataclasses.dataclass(frozen=True)
class _Model:
    name: str = "gru"
    width: int = 4


@dataclasses.dataclass(frozen=True)
class _Data:
    n_train: int = 100
    seed_data: int = 0


@dataclasses.dataclass(frozen=True)
class _Optim(OptimConfig):
    steps: int = 10
    warmup_steps: int = 0


@dataclasses.dataclass(frozen=True)
class _Config:
    task: str = "toy"
    data: _Data = section(_Data)
    model: _Model = section(_Model)
    deq: DEQConfig = deq_section(max_iter=12)
    optim: _Optim = section(_Optim, lr=2e-3)
    run: RunConfig = section(RunConfig, eval_every=5)


@dataclasses.dataclass(frozen=True)
class _Clash:
    a: _Model = section(_Model)
    b: _Model = section(_Model)


@pytest.mark.parametrize(
    ("cls", "changes", "message"),
    [
        (RunConfig, {"log_every": 0}, "run.log_every must be a number >= 1, got 0"),
        (RunConfig, {"eval_every": -1}, "run.eval_every must be a number >= 0, got -1"),
        (RunConfig, {"keep_checkpoints": 0}, "run.keep_checkpoints must be a number >= 1, got 0"),
        (RunConfig, {"mixed_precision": "fp8"}, "run.mixed_precision must be one of ['no', 'fp16', 'bf16']"),
        (OptimConfig, {"lr": 0.0}, "optim.lr must be > 0, got 0.0"),
        (OptimConfig, {"lr": True}, "optim.lr must be > 0, got True"),
        (OptimConfig, {"batch_size": 0}, "optim.batch_size must be a number >= 1, got 0"),
        (OptimConfig, {"grad_clip": -1.0}, "optim.grad_clip must be a number >= 0, got -1.0"),
        (OptimConfig, {"batch_size": 30, "grad_accum": 4}, "optim.batch_size (30) must be divisible by grad_accum (4)"),
        (OptimConfig, {"lr": float("nan")}, "optim.lr must be a finite number, got nan (nan and inf are not allowed; "),
        (OptimConfig, {"grad_clip": float("inf")}, "optim.grad_clip must be a finite number, got inf"),
        (RunConfig, {"seed": -1}, "run.seed must be an integer from 0 to 2**32 - 1 = 4294967295"),
        (RunConfig, {"seed": 2**32}, "run.seed must be an integer from 0 to 2**32 - 1 = 4294967295 (what NumPy's and"),
        (RunConfig, {"seed": 1.0}, "run.seed must be an integer from 0 to 2**32 - 1"),
        (RunConfig, {"log_with": ("tensorbord",)}, "run.log_with: unknown tracker 'tensorbord' (did you mean tensorb"),
        (RunConfig, {"project": "../up"}, "run.project must be a name without '/' or '\\' (or none: the preset's"),
        (RunConfig, {"project": ".."}, "run.project must be a name without '/'"),
        (RunConfig, {"dist_timeout": 0.0}, "run.dist_timeout must be a number of seconds > 0, got 0.0"),
        (RunConfig, {"dist_timeout": float("inf")}, "run.dist_timeout must be a finite number, got inf"),
    ],
)
def test_sections_name_the_bad_setting(cls, changes, message):
    cls()  # the defaults pass
    with pytest.raises(ValueError) as info:
        cls(**changes)
    assert message in str(info.value)


def test_section_fields_take_the_task_defaults():
    cfg = _Config()
    assert cfg.optim.lr == 2e-3 and cfg.run.eval_every == 5 and cfg.deq.max_iter == 12
    assert cfg.optim is not _Config().optim or cfg.optim == _Config().optim  # equal values, frozen


@pytest.mark.parametrize(
    ("key", "value", "resolved"),
    [
        ("optim.lr", 1.0, "optim.lr"),  # dotted: as given
        ("task", "x", "task"),  # a top-level field
        ("lr", 1.0, "optim.lr"),  # in one section only
        ("max_iter", 3, "deq.max_iter"),
        ("eval_every", 3, "run.eval_every"),
        ("model", "lstm", "model.name"),  # a section given a plain value: its name
        ("model", _Model("lstm"), "model"),  # a whole section
        ("model", {"width": 3}, "model"),
    ],
)
def test_resolve_key(key, value, resolved):
    assert resolve_key(_Config(), key, value) == resolved


def test_resolve_key_errors_say_what_to_write():
    with pytest.raises(ValueError, match=r"'width' is in several sections: write a\.width or b\.width"):
        resolve_key(_Clash(), "width", 3)
    with pytest.raises(ValueError, match=r"unknown config key 'lrr' \(did you mean optim\.lr\?\); sections: data, "):
        resolve_key(_Config(), "lrr", 1.0)
    with pytest.raises(ValueError, match=r"'run' is a config section: set one of its keys, run\.seed=\.\.\."):
        resolve_key(_Config(), "run", 3)


def test_short_names_on_the_command_line_and_in_presets():
    cfg = apply_overrides(_Config(), ["lr=5e-3", "model=lstm", "max_iter=7", "run.seed=3", "steps=1e2"])
    assert (cfg.optim.lr, cfg.model.name, cfg.deq.max_iter, cfg.run.seed, cfg.optim.steps) == (5e-3, "lstm", 7, 3, 100)
    assert cfg.model.width == 4 and cfg.optim.batch_size == 32  # the rest untouched
    preset = replace_config(_Config(), {"width": 8, "eval_every": 9, "deq.tol": 1e-3, "model": "tcn"})
    assert (preset.model, preset.run.eval_every, preset.deq.tol) == (_Model("tcn", 8), 9, 1e-3)
    with pytest.raises(ValueError, match="optim.lr must be > 0"):
        apply_overrides(_Config(), ["lr=-1"])
    with pytest.raises(ValueError, match="unknown config key 'stepz'"):
        apply_overrides(_Config(), ["stepz=3"])
    with pytest.raises(ValueError, match=r"optim.batch_size \(30\) must be divisible by grad_accum \(4\)"):
        apply_overrides(_Config(), ["batch_size=30", "grad_accum=4"])


def test_run_folders_of_flatter_layouts_read_into_sections():
    flat = {"task": "toy", "model": "lstm", "width": 3, "lr": 0.5, "steps": 7, "seed": 4, "n_train": 9,
            "deq": {"max_iter": 3}, "removed_key": 1}  # fmt: skip
    cfg = config_from_dict(_Config, flat)
    assert cfg.model == _Model("lstm", 3) and cfg.data.n_train == 9 and cfg.deq.max_iter == 3
    assert (cfg.optim.lr, cfg.optim.steps, cfg.run.seed) == (0.5, 7, 4)
    assert cfg.run.eval_every == 5 and cfg.optim.batch_size == 32  # missing keys: the task's section defaults
    nested = config_from_dict(_Config, dataclasses.asdict(cfg))
    assert nested == cfg


def test_the_skeleton_reads_its_settings_from_the_sections():
    changes = ["batch_size=8", "grad_accum=2", "grad_clip=0.5", "run.seed=3", "save_every=4", "jac_weight=0.2"]
    cfg = apply_overrides(_Config(), [*changes, "jac_prob=0.5", "pretrain_steps=6", "max_iter_jitter=2"])
    plans = [schedule_at(cfg, step) for step in range(40)]
    assert {p.micro_batches for p in plans} == {2} and [p.mode for p in plans[5:7]] == ["unrolled", "solve"]
    assert {p.deq.max_iter for p in plans} == {10, 11, 12} and {p.jacobian_weight for p in plans} == {0.2}
    jacobian = cfg.deq.jacobian_schedule(3)  # drawn from run.seed
    # the Jacobian term only in equilibrium steps (from step 6 on), never while pretraining unrolls f
    assert [p.jacobian for p in plans] == [step >= 6 and jacobian.active(step) for step in range(40)]
    assert any(jacobian.active(step) for step in range(6)) and not any(p.jacobian for p in plans[:6])

    def eval_every(config, task):  # the rule of Run.eval_every, on a stand-in for the run
        return Run.eval_every.fget(SimpleNamespace(config=config, task=task, steps=run_steps(task, config)))

    task = Task()
    assert run_steps(task, cfg) == 10 and eval_every(cfg, task) == 5  # optim.steps; run.eval_every
    once = replace_config(cfg, {"eval_every": 0})
    assert eval_every(once, task) == 10  # 0: only at the last step
    task.eval_period, task.steps = 7, 40  # a task's own period (e.g. an epoch) and step count
    assert (eval_every(once, task), eval_every(cfg, task), run_steps(task, cfg)) == (7, 5, 40)


def test_the_run_section_reaches_trackers_precision_and_timeout():
    cfg = _Config()
    assert cfg.run.mixed_precision is None  # unset: the launcher's choice applies
    assert (cfg.run.log_with, cfg.run.project, cfg.run.dist_timeout) == ((), None, 600.0)
    cfg = apply_overrides(cfg, ["run.log_with=tensorboard,wandb,tensorboard", "run.project=p", "run.dist_timeout=5"])
    assert cfg.run.log_with == ("tensorboard", "wandb", "tensorboard")
    assert apply_overrides(cfg, ["run.mixed_precision=bf16"]).run.mixed_precision == "bf16"
    assert apply_overrides(cfg, ["run.mixed_precision=bf16", "run.mixed_precision=none"]).run.mixed_precision is None
    assert (cfg.run.project, cfg.run.dist_timeout, cfg.run.mixed_precision) == ("p", 5.0, None)
    assert RUN_RESUMABLE == {"run.log_with", "run.project", "run.dist_timeout", "run.mixed_precision"}


def _float_keys(config: object) -> list[str]:
    """Dotted names of the fields annotated float (or float | None) in every section of the config ``config``."""
    keys = []
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if not dataclasses.is_dataclass(value):
            continue
        hints = typing.get_type_hints(type(value))
        keys += [f"{field.name}.{f.name}" for f in dataclasses.fields(value)
                 if float in (hints[f.name], *typing.get_args(hints[f.name]))]  # fmt: skip
    return keys


def test_the_float_settings_of_the_shared_sections_are_all_found():
    assert set(_float_keys(_Config())) == {
        "optim.lr", "optim.weight_decay", "optim.grad_clip", "deq.tol", "deq.eval_tol", "deq.backward_tol",
        "deq.phantom_damping", "deq.jac_weight", "deq.jac_prob", "deq.jac_growth", "run.dist_timeout",
    }  # fmt: skip


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
@pytest.mark.parametrize("key", _float_keys(_Config()))
def test_every_float_setting_refuses_nan_and_inf_naming_it(key, value):
    with pytest.raises(ValueError) as info:
        apply_overrides(_Config(), [f"{key}={value}"])
    assert f"{key} must be a finite number" in str(info.value) and f"got {value}" in str(info.value)


def test_seeds_are_those_numpy_and_torch_accept():
    assert SEED_LIMIT == 2**32
    assert apply_overrides(_Config(), [f"run.seed={2**32 - 1}"]).run.seed == 2**32 - 1
    with pytest.raises(ValueError, match=r"^run\.seed must be an integer from 0 to 2\*\*32 - 1 .*, got 4294967296"):
        apply_overrides(_Config(), [f"run.seed={2**32}"])


@dataclasses.dataclass(frozen=True)
class _Numbers:
    rate: float = 0.5
    limit: float | None = None
    count: int = 3


def test_the_checks_refuse_nan_and_inf_with_the_default():
    check_finite(_Numbers(limit=2.0))  # finite values pass
    with pytest.raises(ValueError, match=r"^rate must be a finite number, got nan \(.*; the default is 0\.5\)\.$"):
        check_finite(_Numbers(rate=float("nan")))
    with pytest.raises(ValueError, match=r"^limit must be a finite number or none, got -inf \(.*default is none\)"):
        check_finite(_Numbers(limit=float("-inf")))
    with pytest.raises(ValueError, match=r"^rate must be a finite number, got nan"):
        check_at_least(_Numbers(rate=float("nan")), 0, "rate")  # nan < 0 is False: refused all the same
    with pytest.raises(ValueError, match=r"^rate must be a finite number, got inf"):
        check_at_least(_Numbers(rate=float("inf")), 0, "rate")
