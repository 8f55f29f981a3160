"""Bad input found by fault injection: each gets one clear line naming the problem and the fix,
or, where a user expects it to work (an empty batch, a NaN sample masked by the loss), a correct result."""

from __future__ import annotations

import warnings

import pytest
import torch

import deq_core
from conftest import METHODS, scaled_to_norm

# --------------------------------------------------------------------------------------------------------------
# Empty batch: solved trivially
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_empty_batch_is_an_empty_converged_result_without_calling_f(method):
    calls = []

    def f(z):
        calls.append(1)
        return torch.cos(z)

    for z0 in (torch.zeros(0, 5), (torch.zeros(0, 2, 3), torch.zeros(0, 4, dtype=torch.float64))):
        res = deq_core.solve(f, z0, solver=method)
        assert calls == [] and res.nfe == 0 and res.iterations == 0
        assert res.all_converged and res.converged.shape == (0,) and res.residual.shape == (0,)
        assert res.trace.shape == (0, 0) and res.iterations_per_sample.shape == (0,)
        tensors = (res.z,) if isinstance(z0, torch.Tensor) else res.z
        assert [(t.shape, t.dtype) for t in tensors] == [(t.shape, t.dtype) for t in deq_core._state.as_tensors(z0)]
        assert "0/0 samples" in res.summary()


@pytest.mark.parametrize("backward", ["implicit", "phantom", "jfb"])
def test_empty_batch_through_the_deq_layer_and_its_backward(backward):
    w = torch.randn(4, 4, requires_grad=True)
    f = lambda z: torch.tanh(z @ w.T)
    z, info = deq_core.DEQ(backward=backward)(f, torch.zeros(0, 4))
    assert z.shape == (0, 4) and info.nfe == 0 and bool(info.converged.all())
    z.sum().backward()
    assert w.grad is not None and torch.equal(w.grad, torch.zeros(4, 4))
    z, info = deq_core.DEQ()(f, torch.zeros(0, 4), unroll=3)
    assert z.shape == (0, 4) and info.residual.shape == (0,)
    z, info = deq_core.DEQ(backward=backward)(f, torch.zeros(0, 4), jacobian_loss=True)
    assert info.jacobian_loss is not None and float(info.jacobian_loss.detach()) == 0.0  # empty average: 0, not NaN


# --------------------------------------------------------------------------------------------------------------
# f returning another dtype, shape or device than the state: checked at the first call, naming f
# --------------------------------------------------------------------------------------------------------------


def to_float64(z):
    return torch.cos(z).double()


def to_int64(z):
    return torch.ones_like(z, dtype=torch.int64)


def to_meta(z):
    return torch.cos(z).to("meta")


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(
    ("f", "exc", "fragments"),
    [
        (to_float64, TypeError, ["to_float64", "torch.float64", "torch.float32", ".to("]),
        (to_int64, TypeError, ["to_int64", "torch.int64", "torch.float32"]),
        (to_meta, ValueError, ["to_meta", "meta", "cpu"]),
    ],
    ids=["float64", "int64", "device"],
)
def test_f_output_dtype_or_device_is_named(method, f, exc, fragments):
    with pytest.raises(exc) as err:
        deq_core.solve(f, torch.zeros(2, 3), solver=method)
    message = str(err.value)
    assert "\n" not in message and all(s in message for s in fragments), message


def test_f_output_dtype_checked_per_tensor_of_a_tuple_and_in_the_deq_layer():
    z0 = (torch.zeros(2, 3), torch.zeros(2, 2, dtype=torch.float64))
    with pytest.raises(TypeError, match=r"f\(z\)\[1\].*torch.float32.*torch.float64"):
        deq_core.solve(lambda z: (torch.cos(z[0]), torch.cos(z[1]).float()), z0)
    deq_core.solve(lambda z: (torch.cos(z[0]), torch.cos(z[1])), z0)  # the right dtypes per tensor pass
    with pytest.raises(TypeError, match="to_float64"):
        deq_core.DEQ()(to_float64, torch.zeros(2, 3), unroll=2)


def test_f_shape_mismatch_names_f_and_both_shapes():
    def drops_a_column(z):
        return z[:, :2]

    with pytest.raises(ValueError, match=r"drops_a_column.*\(2, 2\).*\(2, 3\)"):
        deq_core.solve(drops_a_column, torch.zeros(2, 3))


def test_f_output_checked_at_the_first_call_only():
    """The checks cost one Python pass at the first call; later calls are not re-checked (the hot loop stays lean),
    and a dtype that f changes later still reaches the solver's dtype by the cast the solver makes anyway."""
    calls = []

    def f(z):
        calls.append(1)
        out = torch.cos(z)
        return out if len(calls) == 1 else out.double()

    res = deq_core.solve(f, torch.zeros(2, 3), solver="fixed_point", max_iter=5, tol=1e-12)
    assert res.nfe == len(calls) == 5  # no TypeError although calls 2..5 returned float64


def test_autocast_outputs_of_lower_precision_are_accepted():
    """Under autocast a Linear returns bfloat16 for a float32 state: that is the user's intent, not a bug."""
    lin = torch.nn.Linear(3, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        res = deq_core.solve(lambda z: 0.1 * lin(z), torch.zeros(2, 3), max_iter=20, tol=1e-2)
    assert res.z.dtype == torch.float32
    with pytest.raises(TypeError, match="bfloat16"):  # the same f outside autocast, returning bf16, is an error
        deq_core.solve(lambda z: 0.1 * lin(z).bfloat16(), torch.zeros(2, 3), max_iter=20, tol=1e-2)


# --------------------------------------------------------------------------------------------------------------
# Low-precision states: the statistics describe the returned z
# --------------------------------------------------------------------------------------------------------------


def _recomputed_rel(f, z: torch.Tensor) -> torch.Tensor:
    fz = f(z).double()
    return torch.linalg.vector_norm(fz - z.double(), dim=1) / torch.linalg.vector_norm(fz, dim=1)


@pytest.mark.parametrize("method", METHODS)
def test_bfloat16_residual_and_converged_describe_the_returned_z(method):
    """The solver iterates in float32; the returned z is rounded to bfloat16 (8 bits of mantissa), whose residual
    (recomputed here in float64 from f of the returned z) can be far above the float32 iterate's. The reported
    residual, converged flag, per-sample iteration count and fz are those of the returned z."""
    w = scaled_to_norm(torch.randn(16, 16), 0.5)
    x = torch.randn(8, 16)
    f = lambda z: torch.tanh(z @ w.T.to(z.dtype) + x.to(z.dtype))
    for tol in (1e-3, 1e-2):
        res = deq_core.solve(f, torch.zeros(8, 16, dtype=torch.bfloat16), solver=method, max_iter=60, tol=tol)
        true = _recomputed_rel(f, res.z)
        torch.testing.assert_close(res.residual.double(), true, rtol=1e-6, atol=0)
        assert torch.equal(res.converged, res.residual <= tol)
        per_sample = res.iterations_per_sample
        assert bool((per_sample[~res.converged] == res.iterations).all())
        assert isinstance(res.fz, torch.Tensor) and torch.equal(res.fz, f(res.z))  # fz is f of the returned z


# --------------------------------------------------------------------------------------------------------------
# Option types and sizes
# --------------------------------------------------------------------------------------------------------------

OPTION_ERRORS = [
    ("anderson", {"beta": "0.5"}, TypeError, "anderson: beta must be a number"),
    ("anderson", {"reg": "1e-8"}, TypeError, "anderson: reg must be a number"),
    ("anderson", {"m": "8"}, TypeError, "anderson: m must be an int"),
    ("anderson", {"reg": float("inf")}, ValueError, "anderson: reg must be finite"),
    ("anderson", {"reg": float("nan")}, ValueError, "anderson: reg must be"),
    ("anderson", {"beta": True}, TypeError, "anderson: beta must be a number"),
    ("broyden", {"armijo": "1e-4"}, TypeError, "broyden: armijo must be a number"),
    ("broyden", {"memory": 2.0}, TypeError, "broyden: memory must be an int"),
    ("broyden", {"line_search": "yes"}, TypeError, "broyden: line_search must be True or False"),
    ("fixed_point", {"damping": "0.5"}, TypeError, "fixed_point: damping must be a number"),
    ("fixed_point", {"damping": None}, TypeError, "fixed_point: damping must be a number"),
]


@pytest.mark.parametrize(("method", "options", "exc", "fragment"), OPTION_ERRORS)
def test_option_type_errors_name_the_option_and_the_type(method, options, exc, fragment):
    with pytest.raises(exc) as err:
        deq_core.solve(torch.cos, torch.zeros(2, 3), solver=method, **options)
    message = str(err.value)
    assert message.startswith(fragment) and "\n" not in message, message
    solver_class = {"fixed_point": deq_core.FixedPoint, "anderson": deq_core.Anderson, "broyden": deq_core.Broyden}
    with pytest.raises(exc, match=fragment):  # the same check, once, when the object is built
        solver_class[method](**options)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [({"damping": "0.5"}, "Phantom: damping must be a number"), ({"steps": 2.0}, "Phantom: steps must be an int")],
)
def test_phantom_option_type_errors_name_the_option(kwargs, fragment):
    with pytest.raises(TypeError, match=fragment):
        deq_core.Phantom(**kwargs)


@pytest.mark.parametrize(("method", "option"), [("anderson", "m"), ("broyden", "memory")])
def test_huge_history_is_sized_by_max_iter(method, option):
    """m / memory of 10**6 with max_iter 20: the buffers hold at most max_iter entries (no terabyte allocation), and
    the result is identical to a history that is just long enough never to be reduced or overwritten."""
    w = scaled_to_norm(torch.randn(32, 32, dtype=torch.float64), 0.9)
    x = torch.randn(3, 32, dtype=torch.float64)
    f = lambda z: torch.tanh(z @ w.T + x)
    z0 = torch.zeros(3, 32, dtype=torch.float64)

    def run():
        return deq_core.solve(f, z0, solver=method, max_iter=20, tol=1e-12, **{option: 10**6})

    huge, peak = deq_core.peak_live_bytes(run)
    assert peak < 200 * 3 * 32 * 8 * 20  # a few hundred states of history at most, not 10**6
    enough = deq_core.solve(f, z0, solver=method, max_iter=20, tol=1e-12, **{option: 20})
    assert torch.equal(huge.z, enough.z) and huge.nfe == enough.nfe


# --------------------------------------------------------------------------------------------------------------
# One NaN sample with on_nonfinite="warn": the other samples' gradients are those of the batch without it
# --------------------------------------------------------------------------------------------------------------

BATCH, DIM, BAD = 4, 5, 2


def _cell():
    gen = torch.Generator().manual_seed(3)
    w = scaled_to_norm(torch.randn(DIM, DIM, generator=gen, dtype=torch.float64), 0.7).requires_grad_()
    x = torch.randn(BATCH, DIM, generator=gen, dtype=torch.float64).requires_grad_()
    return w, x


def _deq(backward: str) -> deq_core.DEQ:
    return deq_core.DEQ(
        solver="anderson",
        max_iter=200,
        tol=1e-13,
        backward=deq_core.Implicit(max_iter=200, tol=1e-13) if backward == "implicit" else backward,
        on_nonfinite="warn",
    )


def _grads(backward: str, f, batch: int, w: torch.Tensor, x_leaf: torch.Tensor, keep: list[int], mask: str):
    """Gradients of (w, x_leaf) of a loss over the samples ``keep`` (selected by indexing or by a 0/1 weight), the
    DEQ output, its info and the warnings raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        z, info = _deq(backward)(f, torch.zeros(batch, DIM, dtype=torch.float64))
    weights = torch.arange(1.0, DIM + 1, dtype=torch.float64)
    if mask == "index":
        loss = (z[keep] * weights).square().sum()
    else:
        select = torch.zeros(batch, 1, dtype=torch.float64)
        select[keep] = 1.0
        loss = (z * weights * select).square().sum()
    gw, gx = torch.autograd.grad(loss, (w, x_leaf))
    return gw, gx, z, info, [str(c.message) for c in caught]


@pytest.mark.parametrize("mask", ["index", "weight"])
@pytest.mark.parametrize("backward", ["implicit", "phantom", "jfb"])
@pytest.mark.parametrize("where", ["input", "state"])
def test_nan_sample_is_excluded_from_the_gradient(backward, mask, where):
    """Sample 2 is NaN: its input (``where="input"``: f is NaN for it at any state) or f once the sample's z leaves
    |z| < 0.05 (``"state"``). The parameter gradient equals that of the batch without sample 2 (float64, tight
    solves), the NaN sample's rows of z are finite and carry no gradient, and the warning names the sample."""
    w, x = _cell()
    keep = [i for i in range(BATCH) if i != BAD]
    poison = torch.zeros(BATCH, 1, dtype=torch.float64)
    poison[BAD] = float("nan") if where == "input" else 1.0
    if where == "input":
        f = lambda z: torch.tanh(z @ w.T + (x + poison))
    else:
        f = lambda z: torch.tanh(z @ w.T + x) + 0.0 * torch.log(0.05 - z.abs().amax(1, keepdim=True) * poison)
    gw, gx, z, info, messages = _grads(backward, f, BATCH, w, x, keep, mask)
    assert info.nonfinite.tolist() == [i == BAD for i in range(BATCH)]
    assert any("sample(s) [2]" in m for m in messages), messages
    assert torch.isfinite(z).all()

    x_good = x.detach()[keep].clone().requires_grad_()
    f_good = lambda z: torch.tanh(z @ w.T + x_good)
    ref_w, ref_x, _, ref_info, ref_messages = _grads(backward, f_good, BATCH - 1, w, x_good, [0, 1, 2], "index")
    assert not bool(ref_info.nonfinite.any()) and ref_messages == []
    assert torch.isfinite(gw).all() and torch.isfinite(gx).all()
    torch.testing.assert_close(gw, ref_w, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(gx[keep], ref_x, rtol=1e-9, atol=1e-12)
    assert torch.equal(gx[BAD], torch.zeros(DIM, dtype=torch.float64))  # the NaN sample contributes nothing


def test_nan_sample_with_jacobian_loss_keeps_it_finite():
    w, x = _cell()
    x_in = x + torch.tensor([[0.0], [0.0], [float("nan")], [0.0]], dtype=torch.float64)
    with pytest.warns(RuntimeWarning, match=r"sample\(s\) \[2\]"):
        z, info = _deq("implicit")(lambda z: torch.tanh(z @ w.T + x_in), torch.zeros(BATCH, DIM, dtype=torch.float64),
                                   jacobian_loss=True)  # fmt: skip
    assert info.jacobian_loss is not None and bool(torch.isfinite(info.jacobian_loss))
    (z[[0, 1, 3]].sum() + info.jacobian_loss).backward()
    assert torch.isfinite(w.grad).all()


def test_on_nonfinite_raise_is_unchanged_for_a_nan_input():
    w, x = _cell()
    x_in = x + torch.tensor([[0.0], [0.0], [float("nan")], [0.0]], dtype=torch.float64)
    deq = deq_core.DEQ(max_iter=50)
    with pytest.raises(FloatingPointError, match=r"sample\(s\) \[2\]"):
        deq(lambda z: torch.tanh(z @ w.T + x_in), torch.zeros(BATCH, DIM, dtype=torch.float64))
