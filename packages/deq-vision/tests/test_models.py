"""The MDEQ and the baselines: output shapes for every config, parameter counts, timm registration, gradients through
the implicit backward to every branch."""

from __future__ import annotations

import pytest
import timm
import torch

import deq_core
import deq_vision
from deq_core.train.overrides import apply_overrides
from deq_core.train.run_config import replace_config
from deq_vision.configs import PRESETS
from deq_vision.models import MODEL_NAMES, count_parameters, create_model, default_deq, is_deq_model
from deq_vision.train import build_model

BackwardMode = deq_core.Implicit | deq_core.Phantom | deq_core.JFB

# (low, high) parameter counts. JR paper (jacobian-regularization-icml2021.txt) Table 2, column Size: MDEQ (CIFAR-10)
# 10M, MDEQ-small 18M, MDEQ-large 63M (ImageNet); MDEQ-tiny's size (about 170K) is not printed in the papers' text.
# The JR paper's ImageNet runs: mdeq_small_imagenet_jr (a wider head), mdeq_large_imagenet_jr.
PARAMETERS = {
    "mdeq_tiny_cifar10": (0.12e6, 0.2e6),
    "mdeq_large_cifar10": (9e6, 12e6),
    "mdeq_small_imagenet": (15e6, 20e6),
    "mdeq_small_imagenet_jr": (17e6, 20e6),
    "mdeq_large_imagenet": (60e6, 70e6),
    "mdeq_large_imagenet_jr": (60e6, 70e6),
    "mdeq_mini": (0.05e6, 0.15e6),
}


@pytest.mark.parametrize("name", list(PARAMETERS))
def test_parameter_counts_match_the_papers(name: str) -> None:
    count = count_parameters(timm.create_model(name))
    low, high = PARAMETERS[name]
    assert low <= count <= high, f"{name}: {count} parameters"


def test_every_registered_name_resolves_in_timm() -> None:
    listed = set(timm.list_models("mdeq_*"))
    assert {name for name in MODEL_NAMES if is_deq_model(name)} <= listed
    for name in MODEL_NAMES:
        assert timm.is_model(name)
    model = timm.create_model("mdeq_large_cifar10", num_classes=7, deq=default_deq(max_iter=3))
    assert isinstance(model, deq_vision.MDEQ)
    assert model.deq.max_iter == 3 and model.get_classifier().out_features == 7
    with pytest.raises(RuntimeError, match="No pretrained weights exist"):  # timm's error: no source given
        timm.create_model("mdeq_tiny_cifar10", pretrained=True)


def _small_input(name: str) -> int:
    """A cheap input side for every config: ImageNet models at 64 px (shapes are the same for any multiple of 32)."""
    cfg = PRESETS[name]
    return 64 if cfg.data.dataset == "imagenet" else cfg.data.image_size


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_output_shape_of_every_config(name: str) -> None:
    cfg = replace_config(PRESETS[name], {"deq.max_iter": 2, "deq.max_iter_jitter": 0})
    model = build_model(cfg).eval()
    side = _small_input(name)
    with torch.no_grad():
        logits = model(torch.randn(2, cfg.in_chans, side, side))
    assert logits.shape == (2, cfg.head_classes)
    assert torch.isfinite(logits).all()


def test_state_has_one_tensor_per_branch_at_halving_resolutions() -> None:
    model = timm.create_model("mdeq_large_cifar10", deq=default_deq(max_iter=2)).eval()
    with torch.no_grad():
        z, info = model.equilibrium(torch.randn(2, 3, 32, 32))
    assert [tuple(t.shape) for t in z] == [(2, 32, 32, 32), (2, 64, 16, 16), (2, 128, 8, 8), (2, 256, 4, 4)]
    assert info.nfe <= 2 and info.residual.shape == (2,)
    assert all(float(t.abs().sum()) == 0 for t in model.initial_state(torch.randn(2, 32, 32, 32)))


def test_gradients_reach_every_branch_through_the_implicit_backward() -> None:
    torch.manual_seed(0)
    model = timm.create_model("mdeq_large_cifar10", deq=default_deq(4, 4), dropout=0.0)
    model.train()
    logits, info = model(torch.randn(2, 3, 32, 32), return_info=True)
    assert info.mode == "solve"
    logits.logsumexp(1).sum().backward()
    assert info.nfe_backward is not None and info.nfe_backward >= 1
    for i, block in enumerate(model.blocks):
        for pname, p in block.named_parameters():
            assert p.grad is not None and torch.isfinite(p.grad).all(), f"branch {i} {pname}"
            assert float(p.grad.abs().sum()) > 0, f"no gradient reached branch {i} ({pname})"
    for pname, p in model.fusion.named_parameters():
        if pname.endswith(("original0", "original1", "weight")) and "post" not in pname:
            assert p.grad is not None and float(p.grad.abs().sum()) > 0, pname


def test_pretraining_and_jacobian_loss() -> None:
    model = timm.create_model("mdeq_mini", in_chans=3, deq=default_deq(max_iter=3)).train()
    with deq_core.use_plan(model, deq_core.Plan(unroll=2, jacobian_loss=True)):
        logits, info = model(torch.randn(2, 3, 16, 16), return_info=True)
    assert info.mode == "unrolled" and info.nfe == 2
    assert info.jacobian_loss is not None and float(info.jacobian_loss.detach()) > 0
    (logits.sum() + info.jacobian_loss).backward()
    assert model.blocks[0].conv1.parametrizations.weight.original1.grad is not None


def test_bad_settings_raise() -> None:
    with pytest.raises(ValueError, match="divisible by num_groups"):
        deq_vision.MDEQ(channels=(10, 20), head_channels=(4, 8), final_channels=16)
    with pytest.raises(ValueError, match="unknown model"):
        create_model("mdeq_does_not_exist", num_classes=10)
    with pytest.raises(ValueError, match="unknown model settings"):
        create_model("mdeq_mini", num_classes=10, solverr="broyden")
    with pytest.raises(ValueError, match=r"solver settings go in the layer: create_model\(..., deq=deq_core.DEQ"):
        create_model("mdeq_mini", num_classes=10, max_iter=3)  # the settings of the layer, not of the model
    with pytest.raises(TypeError, match="deq must be a deq_core.DEQ layer"):
        timm.create_model("mdeq_mini", deq="broyden")


@pytest.mark.parametrize(
    "backward", [deq_core.Implicit(deq_core.Broyden(), max_iter=6, tol=1e-3), deq_core.Phantom(steps=3), deq_core.JFB()]
)
def test_one_training_step_in_every_backward_mode(backward: BackwardMode) -> None:
    """The layer's backward mode is the model's: every mode carries gradients to the cell's weights (all branch
    blocks and the fusion) and to the stem, and one Adam step changes the cell."""
    torch.manual_seed(0)
    deq = deq_core.DEQ(solver=deq_core.Broyden(), max_iter=6, tol=1e-3, backward=backward)
    model = timm.create_model("mdeq_mini", num_classes=3, dropout=0.0, deq=deq).train()
    assert model.deq is deq
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    logits, info = model(torch.randn(4, 1, 16, 16), return_info=True)
    torch.nn.functional.cross_entropy(logits, torch.arange(4) % 3).backward()
    cell = [*model.blocks.named_parameters(), *model.fusion.named_parameters(), *model.stem.named_parameters()]
    for pname, p in cell:
        if p.requires_grad and "post" not in pname:
            assert p.grad is not None and float(p.grad.abs().sum()) > 0, f"no gradient reached {pname}"
    assert (info.nfe_backward is not None) == isinstance(backward, deq_core.Implicit)  # only Implicit solves
    before = model.blocks[0].conv1.parametrizations.weight.original1.detach().clone()
    opt.step()
    assert not torch.equal(model.blocks[0].conv1.parametrizations.weight.original1, before)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            ["deq.backward=phantom", "deq.phantom_steps=4", "deq.phantom_damping=0.8"],
            deq_core.Phantom(steps=4, damping=0.8),
        ),
        (["deq.backward=jfb"], deq_core.JFB()),
        (
            [
                "deq.backward_solver=anderson",
                "deq.backward_options=m=3",
                "deq.backward_max_iter=9",
                "deq.backward_tol=1e-5",
            ],
            deq_core.Implicit(deq_core.Anderson(m=3), max_iter=9, tol=1e-5),
        ),
    ],
)
def test_config_overrides_reach_the_models_layer(overrides: list[str], expected: BackwardMode) -> None:
    """``key=value`` overrides of a preset (as on the command line) set the backward mode of the built MDEQ."""
    cfg = apply_overrides(
        PRESETS["digits-mdeq"], ["deq.solver=anderson", "deq.max_iter=7", "deq.eval_max_iter=9", *overrides]
    )
    model = build_model(cfg)
    assert isinstance(model, deq_vision.MDEQ)
    assert model.deq.backward == expected
    assert (model.deq.solver, model.deq.max_iter, model.deq.eval_max_iter) == (deq_core.Anderson(), 7, 9)


@pytest.mark.parametrize(
    "bad", ["deq.phantom_steps=0", "deq.phantom_damping=0", "deq.phantom_damping=1.5", "deq.backward=adjoint"]
)
def test_bad_backward_settings_raise(bad: str) -> None:
    with pytest.raises(ValueError, match=bad.split("=")[0]):
        apply_overrides(PRESETS["digits-mdeq"], [bad])


def test_the_mdeq_forward_takes_no_per_step_arguments() -> None:
    """Unroll, limit and Jacobian term reach the MDEQ's layer by its plan only (deq_core.use_plan), not as
    arguments of forward / equilibrium."""
    import inspect

    from deq_vision.models.mdeq import MDEQ

    for method in (MDEQ.forward, MDEQ.equilibrium):
        assert not {"unroll", "max_iter", "jacobian_loss"} & set(inspect.signature(method).parameters), method
    model = timm.create_model("mdeq_mini", in_chans=3, deq=default_deq(max_iter=3)).eval()
    with torch.no_grad(), deq_core.use_plan(model, deq_core.Plan(max_iter=1)):
        _, info = model(torch.randn(2, 3, 16, 16), return_info=True)
    assert info.nfe == 1 and model.deq.plan is None  # the hard stop held for the block only
