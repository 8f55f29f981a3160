"""The configs' sections: nothing but sections at the top level, no setting in two sections (so that every short
name resolves), each section's checks naming its dotted key, short and dotted names alike, and the training
skeleton's settings of a preset."""

import dataclasses
import typing
from pathlib import Path

import pytest

from deq_core.train.errors import UsageError
from deq_core.train.run_config import flat_dict
from deq_toy.configs import PRESETS, ArithmeticConfig, SyntheticConfig, load_config
from deq_toy.loop import RESUMABLE_CHANGES, ToyTask

SECTIONS = ("data", "model", "deq", "optim", "run")


@pytest.mark.parametrize("cls", [SyntheticConfig, ArithmeticConfig])
def test_a_config_is_sections_whose_settings_have_one_section_each(cls):
    config = cls()
    assert tuple(f.name for f in dataclasses.fields(config)) == SECTIONS
    names = [key.partition(".")[2] for key in flat_dict(config)]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert config.data.task == cls.__name__.removesuffix("Config").lower()


@pytest.mark.parametrize(
    ("preset", "override", "message"),
    [
        ("synthetic-tiny", "n_train=0", "data.n_train must be a number >= 1, got 0"),
        ("synthetic-tiny", "noise_std=-0.1", "data.noise_std must be a number >= 0, got -0.1"),
        ("synthetic-tiny", "width=0", "model.width must be a number >= 1, got 0"),
        ("synthetic-tiny", "batch_size=0", "optim.batch_size must be a number >= 1, got 0"),
        ("synthetic-tiny", "log_every=0", "run.log_every must be a number >= 1, got 0"),
        ("synthetic-tiny", "deq.max_iter=0", "deq.max_iter must be a number >= 1, got 0"),
        ("arith-deq-tiny", "long_length=40", "data.length and long_length must be odd and >= 3, got 31, 40"),
        ("arith-deq-tiny", "hidden=0", "model.hidden must be a number >= 1, got 0"),
        ("arith-deq-tiny", "max_steps=-1", "optim.max_steps must be a number >= 0, got -1"),
        ("arith-deq-tiny", "grad_clip=-1", "optim.grad_clip must be a number >= 0, got -1.0"),
        ("arith-deq-tiny", "eval_every=-1", "run.eval_every must be a number >= 0, got -1"),
    ],
)
def test_each_section_checks_its_settings(preset, override, message):
    with pytest.raises(UsageError, match=r"^bad override for config") as info:
        load_config(preset, [override])
    assert message in str(info.value)


def test_short_and_dotted_names_set_the_same_setting():
    short = load_config("arith-deq-tiny", ["lr=2e-3", "model=gru", "variant=two", "threads=2", "max_iter=7"])
    dotted = ["optim.lr=2e-3", "model.name=gru", "data.variant=two", "run.threads=2", "deq.max_iter=7"]
    assert short == load_config("arith-deq-tiny", dotted)
    assert (short.optim.lr, short.model.name, short.data.variant, short.run.threads) == (2e-3, "gru", "two", 2)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_the_skeletons_settings_of_every_preset(name):
    """As deq-toy 0.5 set them by hand, now read by the skeleton from the config's sections: one checkpoint kept, no
    clipping for the 1D task, evaluations every ``run.eval_every`` steps or once per epoch (0); the task adds only its
    step budget, its epoch and what may change on resume."""
    config = PRESETS[name]
    task = ToyTask(config, Path("data"))
    per_epoch = max(config.data.n_train // config.optim.batch_size, 1)
    assert (task.steps, task.eval_period) == (config.optim.epochs * per_epoch, per_epoch)
    assert config.run.keep_checkpoints == 1 and config.run.stop_after == 0
    assert config.optim.grad_clip == (1.0 if isinstance(config, ArithmeticConfig) else 0.0)
    assert task.find_unused_parameters == isinstance(config, ArithmeticConfig)
    assert task.resumable == RESUMABLE_CHANGES and all(k.startswith("run.") for k in RESUMABLE_CHANGES)


def test_eval_every_0_is_once_per_epoch_in_both_tasks():
    synthetic = load_config("synthetic-tiny", ["eval_every=0"])  # 512 pairs in batches of 128: 4 steps an epoch
    assert (synthetic.run.eval_every, ToyTask(synthetic, Path("data")).eval_period) == (0, 4)
    arithmetic = load_config("arith-deq-tiny", ["eval_every=0", "max_steps=3"])  # 128 rows, batch 32; cut at 3
    task = ToyTask(arithmetic, Path("data"))
    assert (task.eval_period, task.steps) == (4, 3)


def _float_keys(config: object) -> list[str]:
    """Dotted names of the fields annotated float (or float | None) in every section of ``config``."""
    keys = []
    for section in dataclasses.fields(config):
        value = getattr(config, section.name)
        hints = typing.get_type_hints(type(value))
        keys += [f"{section.name}.{f.name}" for f in dataclasses.fields(value)
                 if float in (hints[f.name], *typing.get_args(hints[f.name]))]  # fmt: skip
    return keys


_SHARED = {"deq.tol", "deq.eval_tol", "deq.backward_tol", "deq.phantom_damping", "deq.jac_weight", "deq.jac_prob",
           "deq.jac_growth", "optim.lr", "optim.weight_decay", "optim.grad_clip", "run.dist_timeout"}  # fmt: skip
FLOAT_KEYS = [("synthetic-tiny", key) for key in _float_keys(SyntheticConfig())]
FLOAT_KEYS += [("arith-deq-tiny", key) for key in _float_keys(ArithmeticConfig())]


def test_the_float_settings_of_every_section_are_found():
    assert set(_float_keys(SyntheticConfig())) == _SHARED | {"data.noise_std"}
    assert set(_float_keys(ArithmeticConfig())) == _SHARED


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
@pytest.mark.parametrize(("preset", "key"), FLOAT_KEYS)
def test_every_float_setting_refuses_nan_and_inf_naming_it(preset, key, value):
    with pytest.raises(UsageError) as info:
        load_config(preset, [f"{key}={value}"])
    assert f"{key} must be a finite number" in str(info.value) and f"got {value}" in str(info.value)


@pytest.mark.parametrize("preset", ["synthetic-tiny", "arith-deq-tiny"])
def test_seeds_are_those_numpy_and_torch_accept(preset):
    config = load_config(preset, [f"run.seed={2**32 - 1}", f"data.data_seed={2**32 - 1}"])
    assert config.run.seed == config.data.data_seed == 2**32 - 1
    for key in ("run.seed", "data.data_seed"):
        with pytest.raises(UsageError, match=rf"{key} must be an integer from 0 to 2\*\*32 - 1 = 4294967295"):
            load_config(preset, [f"{key}={2**32}"])
