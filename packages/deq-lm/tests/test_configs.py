import dataclasses
import typing
from pathlib import Path

import pytest
import torch

from deq_core.train.overrides import apply_overrides
from deq_core.train.run_config import replace_config
from deq_lm.configs import MODELS, PAPER_RESULTS, PRESETS, Config, get_config
from deq_lm.models import build_model, count_parameters
from deq_lm.train import main

PTB_VOCAB, WT103_VOCAB = 10_000, 267_735


def _paper_vocab(name: str) -> int:
    return PTB_VOCAB if name.startswith("ptb-") else WT103_VOCAB


def test_every_preset_builds_and_every_model_has_a_tiny_preset():
    for name, cfg in PRESETS.items():
        assert isinstance(cfg, Config), name
        if name.startswith(("ptb-", "wt103-")):
            with torch.device("meta"):  # GPU-sized: build without allocating
                build_model(cfg, _paper_vocab(name))
        else:
            build_model(cfg, 16)
    assert {f"tiny-{m.replace('_', '-')}" for m in MODELS} <= set(PRESETS)


def test_every_paper_preset_has_a_published_result_and_a_tiny_twin():
    paper = [name for name in PRESETS if name.startswith(("ptb-", "wt103-"))]
    assert len(paper) == 13 and set(paper) == set(PAPER_RESULTS)
    for name in paper:
        big, tiny = get_config(name), get_config(f"tiny-{name}")
        kind = ("name", "head", "tie_weights", "pre_ln")
        assert [getattr(tiny.model, k) for k in kind] == [getattr(big.model, k) for k in kind]
        assert (tiny.deq.jac_weight > 0) == (big.deq.jac_weight > 0) and tiny.data.task == big.data.task == "lm"


@pytest.mark.parametrize(
    ("name", "published"),
    [
        ("wt103-deq-transformer-medium-adaptive", 98e6),  # JR Table 1 (the authors' script)
        ("wt103-transformer-xl-medium-16", 151e6),  # Transformer-XL base (its paper's "Standard")
        ("wt103-deq-transformer-medium", 172e6),
        ("wt103-deq-transformer-small", 138e6),
        ("wt103-transformer-tied-16", 138e6),
        ("wt103-deq-trellisnet", 180e6),
        ("wt103-trellisnet-70", 180e6),
    ],
)
def test_paper_presets_have_the_published_size(name, published):
    with torch.device("meta"):
        n = count_parameters(build_model(get_config(name), WT103_VOCAB))
    assert abs(n - published) < 0.05 * published, n


def test_presets_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        get_config("tiny-lstm").optim = None  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        get_config("tiny-lstm").optim.lr = 1.0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("model", "low", "high"),
    [("deq-transformer", 13_000, 15_000), ("lstm", 13_000, 15_000), ("gru", 13_000, 15_000), ("tcn", 15_000, 17_000)],
)
def test_copy_memory_models_have_the_papers_budget(model, low, high):
    for prefix in ("copy", "copy400"):
        cfg = get_config(f"{prefix}-{model}")
        assert low <= count_parameters(build_model(cfg, 10)) <= high
    assert get_config(f"copy400-{model}").data.T == 400 and get_config(f"copy-{model}").data.T >= 100


def test_copy400_claims_runs_share_one_budget_at_equal_parameters():
    """The T = 400 claims runs: one horizon and optimizer for all five, parameters within 15 % of the
    DEQ-Transformer's (the TCN 14 % above, as the paper's 16K against 14K)."""
    names = [f"copy400-cpu-{m}" for m in ("deq-transformer", "deq-trellisnet", "tcn", "lstm", "gru")]
    configs = [get_config(n) for n in names]
    assert len({(c.data.T, c.optim, c.run.eval_every) for c in configs}) == 1 and configs[0].data.T == 400
    counts = [count_parameters(build_model(c, 10)) for c in configs]
    assert all(abs(n / counts[0] - 1) <= 0.15 for n in counts), counts


def test_copy_table_models_share_one_budget():
    table = ("copy-deq-transformer", "copy-tcn", "copy-lstm", "copy-gru")
    budgets = {(c.data.T, c.optim) for n, c in PRESETS.items() if n in table}
    assert len(budgets) == 1


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"mem_len": -1}, "model.mem_len must be a number >= 0"),
        ({"model": "rnn"}, "model.name must be one of"),
        ({"model.dropout": 1.0}, "model.dropout must be in [0, 1)"),
        ({"deq.max_iter_jitter": 20}, "deq.max_iter_jitter must be < max_iter"),
        ({"d_model": 7, "model": "deq_transformer"}, "model.d_model must be even"),
        ({"cutoffs": (4, 2)}, "model.cutoffs must be strictly increasing"),
        ({"cutoffs": (4,)}, "model.cutoffs (4,) need head=adaptive"),
        ({"deq.tol": 0.0}, "deq.tol must be > 0"),
        ({"deq.jac_prob": 2.0}, "deq.jac_prob must be in [0, 1]"),
        ({"deq.jac_stop": -1}, "deq.jac_stop must be a number >= 0"),
        ({"deq.phantom_steps": 0}, "deq.phantom_steps must be a number >= 1"),
        ({"deq.phantom_damping": 1.5}, "deq.phantom_damping must be in (0, 1]"),
        ({"T": 0}, "data.T must be a number >= 1"),
        ({"data.task": "translation"}, "data.task must be one of ['copy_memory', 'lm']"),
        ({"corpus": ""}, "data.corpus must be a name"),
        ({"tokenizer": "sentencepiece"}, "data.vocab_size must be >= 3 for the sentencepiece tokenizer"),
        ({"optim.steps": 0}, "optim.steps must be a number >= 1"),
        ({"warmup_steps": -1}, "optim.warmup_steps must be a number >= 0"),
        ({"lr": 0.0}, "optim.lr must be > 0"),
        ({"run.eval_every": -1}, "run.eval_every must be a number >= 0"),
        ({"mixed_precision": "fp8"}, "run.mixed_precision must be one of"),
        ({"tie_weights": True}, "data.task=copy_memory uses model.head=linear without model.tie_weights"),
    ],
)
def test_bad_values_raise_with_the_key(changes, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        replace_config(get_config("tiny-lstm"), changes)


def test_main_job_is_the_deq_transformer_on_copy_memory():
    from deq_lm.train import MAIN_JOB, build_parser

    assert build_parser().parse_args([]).config == MAIN_JOB
    cfg = get_config(MAIN_JOB)
    assert cfg.model.name == "deq_transformer" and cfg.data.task == "copy_memory" and cfg.data.T >= 100


def test_unknown_preset_lists_the_valid_ones():
    with pytest.raises(ValueError, match="valid configs: .*tiny-gru"):
        get_config("copy-rnn")


def test_solver_options_reach_the_deq_layer_and_are_checked():
    from deq_core import Anderson, Broyden
    from deq_core.train.overrides import apply_overrides

    overrides = ["deq.backward_solver=broyden", "deq.backward_options=memory=4", "deq.solver_options=m=3,beta=0.9"]
    cfg = apply_overrides(get_config("tiny-deq-transformer"), overrides)
    deq = build_model(cfg, 10).body.deq
    assert deq.backward.solver == Broyden(memory=4) and deq.solver == Anderson(m=3, beta=0.9)
    with pytest.raises(ValueError, match=r"backward_options: unknown option\(s\) \['m'\] for solver 'broyden'"):
        replace_config(cfg, {"deq.backward_options": ("m=3",)})


@pytest.mark.parametrize(
    "overrides", [["deq.backward=phantom", "deq.phantom_steps=3", "deq.phantom_damping=0.7"], ["deq.backward=jfb"]]
)
def test_backward_mode_reaches_the_deq_layer(overrides):
    """``deq.backward=...`` overrides (as on the command line) set the DEQ body's backward mode."""
    from deq_core import JFB, Phantom
    from deq_core.train.overrides import apply_overrides

    cfg = apply_overrides(get_config("tiny-deq-transformer"), overrides)
    expected = JFB() if cfg.deq.backward == "jfb" else Phantom(steps=3, damping=0.7)
    assert build_model(cfg, 10).body.deq.backward == expected


def _float_keys(cfg: Config) -> list[str]:
    """Dotted names of the fields annotated float (or float | None) in every section of ``cfg``."""
    keys = []
    for section in dataclasses.fields(cfg):
        value = getattr(cfg, section.name)
        hints = typing.get_type_hints(type(value))
        keys += [f"{section.name}.{f.name}" for f in dataclasses.fields(value)
                 if float in (hints[f.name], *typing.get_args(hints[f.name]))]  # fmt: skip
    return keys


FLOAT_KEYS = _float_keys(Config())


def test_the_float_settings_of_every_section_are_found():
    assert set(FLOAT_KEYS) == {
        "model.dropout", "deq.tol", "deq.eval_tol", "deq.backward_tol", "deq.phantom_damping", "deq.jac_weight",
        "deq.jac_prob", "deq.jac_growth", "optim.lr", "optim.weight_decay", "optim.grad_clip", "optim.min_lr_ratio",
        "run.dist_timeout",
    }  # fmt: skip


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
@pytest.mark.parametrize("key", FLOAT_KEYS)
def test_every_float_setting_refuses_nan_and_inf_naming_it(key: str, value: str) -> None:
    with pytest.raises(ValueError) as info:
        apply_overrides(get_config("tiny-deq-transformer"), [f"{key}={value}"])
    assert f"{key} must be a finite number" in str(info.value) and f"got {value}" in str(info.value)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("lr=nan", "optim.lr must be a finite number, got nan"),
        ("lr=inf", "optim.lr must be a finite number, got inf"),
        ("deq.tol=inf", "deq.tol must be a finite number, got inf"),
        ("weight_decay=nan", "optim.weight_decay must be a finite number, got nan"),
        ("grad_clip=nan", "optim.grad_clip must be a finite number, got nan"),
        ("run.seed=4294967296", "run.seed must be an integer from 0 to 2**32 - 1 = 4294967295"),
    ],
)
def test_bad_numbers_on_the_command_line_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], override: str, message: str
) -> None:
    assert main(["--config", "tiny-deq-transformer", "--output-dir", str(tmp_path / "run"), override]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"python -m deq_lm.train: error: {message}"), err
    assert err.count("\n") == 1 and not (tmp_path / "run").exists()
