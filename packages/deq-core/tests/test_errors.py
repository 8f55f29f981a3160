"""Bad input raises a clear error (type and message); NaN in the DEQ forward raises or warns as configured."""

from __future__ import annotations

import warnings

import pytest
import torch

import deq_core
from conftest import METHODS

Z = torch.zeros(2, 3)
Z2 = (torch.zeros(2, 3, 4), torch.zeros(2, 5))


def ident(z):
    return z


SOLVE_ERRORS = [
    # (id, kwargs for solve, exception, message fragment)
    ("shape_change", {"f": lambda z: z[:, :2], "z0": Z}, ValueError, "shape"),
    ("tuple_shape_change", {"f": lambda z: (z[0], z[1][:, :4]), "z0": Z2}, ValueError, "shape"),
    ("tensor_for_tuple", {"f": lambda z: z[0], "z0": Z2}, TypeError, "same structure"),
    ("tuple_for_tensor", {"f": lambda z: (z, z), "z0": Z}, TypeError, "same structure"),
    ("wrong_tuple_length", {"f": lambda z: (z[0],), "z0": Z2}, TypeError, "same structure"),
    ("non_tensor_in_output", {"f": lambda z: (z[0], 1.0), "z0": Z2}, TypeError, "must be a Tensor"),
    ("float_state", {"f": ident, "z0": 1.0}, TypeError, "torch.Tensor"),
    ("numpy_like_list", {"f": ident, "z0": [1.0, 2.0]}, TypeError, "must be a torch.Tensor"),
    ("dict_state", {"f": ident, "z0": {"a": Z}}, TypeError, "torch.Tensor"),
    ("nested_state", {"f": ident, "z0": (Z, (Z, Z))}, TypeError, "nested"),
    ("int_tensor", {"f": ident, "z0": torch.zeros(2, 3, dtype=torch.int64)}, TypeError, "floating-point"),
    ("bool_tensor", {"f": ident, "z0": torch.zeros(2, 3, dtype=torch.bool)}, TypeError, "floating-point"),
    ("int_in_tuple", {"f": ident, "z0": (Z, torch.zeros(2, 2, dtype=torch.int32))}, TypeError, "floating-point"),
    ("empty_tuple", {"f": ident, "z0": ()}, ValueError, "empty"),
    ("empty_list", {"f": ident, "z0": []}, ValueError, "empty"),
    ("scalar_tensor", {"f": ident, "z0": torch.tensor(1.0)}, ValueError, "batch dimension"),
    ("batch_mismatch", {"f": ident, "z0": (torch.zeros(2, 3), torch.zeros(3, 3))}, ValueError, "batch size"),
    ("tol_zero", {"f": ident, "z0": Z, "tol": 0.0}, ValueError, "tol"),
    ("tol_negative", {"f": ident, "z0": Z, "tol": -1e-3}, ValueError, "tol"),
    ("tol_nan", {"f": ident, "z0": Z, "tol": float("nan")}, ValueError, "tol"),
    ("tol_inf", {"f": ident, "z0": Z, "tol": float("inf")}, ValueError, "tol"),
    ("tol_string", {"f": ident, "z0": Z, "tol": "1e-3"}, ValueError, "tol"),
    ("max_iter_zero", {"f": ident, "z0": Z, "max_iter": 0}, ValueError, "max_iter"),
    ("max_iter_negative", {"f": ident, "z0": Z, "max_iter": -5}, ValueError, "max_iter"),
    ("max_iter_float", {"f": ident, "z0": Z, "max_iter": 2.5}, ValueError, "max_iter"),
    ("max_iter_bool", {"f": ident, "z0": Z, "max_iter": True}, ValueError, "max_iter"),
    ("unknown_method", {"f": ident, "z0": Z, "solver": "newton"}, ValueError, "unknown solver"),
    ("unknown_stop_mode", {"f": ident, "z0": Z, "stop_mode": "max"}, ValueError, "stop_mode"),
    ("anderson_m_zero", {"f": ident, "z0": Z, "solver": "anderson", "m": 0}, ValueError, "m"),
    (
        "anderson_m_float",
        {"f": ident, "z0": Z, "solver": "anderson", "m": 2.0},
        TypeError,
        "m must be an int",
    ),  # a type error since 0.2.2
    ("anderson_beta_zero", {"f": ident, "z0": Z, "solver": "anderson", "beta": 0.0}, ValueError, "beta"),
    ("anderson_beta_big", {"f": ident, "z0": Z, "solver": "anderson", "beta": 1.5}, ValueError, "beta"),
    ("anderson_reg_negative", {"f": ident, "z0": Z, "solver": "anderson", "reg": -1.0}, ValueError, "reg"),
    ("broyden_memory_zero", {"f": ident, "z0": Z, "solver": "broyden", "memory": 0}, ValueError, "memory"),
    ("broyden_ls_steps_negative", {"f": ident, "z0": Z, "solver": "broyden", "ls_steps": -1}, ValueError, "ls_steps"),
    ("fixed_point_damping_zero", {"f": ident, "z0": Z, "solver": "fixed_point", "damping": 0.0}, ValueError, "damping"),
    ("fixed_point_damping_big", {"f": ident, "z0": Z, "solver": "fixed_point", "damping": 1.5}, ValueError, "damping"),
    (
        "fixed_point_damping_nan",
        {"f": ident, "z0": Z, "solver": "fixed_point", "damping": float("nan")},
        ValueError,
        "damping",
    ),
    ("z0_nan", {"f": ident, "z0": torch.tensor([[0.0, float("nan")]])}, ValueError, "NaN"),
    ("z0_inf_in_tuple", {"f": ident, "z0": (Z, torch.full((2, 1), float("inf")))}, ValueError, "NaN or Inf"),
]


@pytest.mark.parametrize(("kwargs", "exc", "fragment"), [c[1:] for c in SOLVE_ERRORS], ids=[c[0] for c in SOLVE_ERRORS])
def test_solve_rejects_bad_input(kwargs, exc, fragment):
    with pytest.raises(exc, match=fragment):
        deq_core.solve(**kwargs)


@pytest.mark.parametrize("method", METHODS)
def test_unknown_option_lists_valid_options(method):
    with pytest.raises(TypeError) as err:
        deq_core.solve(ident, Z, solver=method, bogus=1)
    message = str(err.value)
    assert "bogus" in message
    for name in deq_core.options_of(method):
        assert name in message
    # options of another method are unknown too
    other = {"fixed_point": "m", "anderson": "memory", "broyden": "damping"}[method]
    with pytest.raises(TypeError, match=other):
        deq_core.solve(ident, Z, solver=method, **{other: 2})


def test_errors_from_f_are_not_hidden():
    def f(z):
        raise KeyError("inside f")

    with pytest.raises(KeyError, match="inside f"):
        deq_core.solve(f, Z)


def test_shape_error_in_deq_tracked_call_and_unrolled():
    with pytest.raises(ValueError, match="shape"):
        deq_core.DEQ()(lambda z: z[:, :2], Z)
    with pytest.raises(ValueError, match="shape"):
        deq_core.DEQ()(lambda z: z[:, :2], Z, unroll=2)


DEQ, Implicit, Phantom = deq_core.DEQ, deq_core.Implicit, deq_core.Phantom
DEQ_ERRORS = [
    # (id, the construction, exception, message fragment)
    ("backward_foo", lambda: DEQ(backward="foo"), ValueError, "unknown backward"),
    ("backward_not_a_strategy", lambda: DEQ(backward=deq_core.Broyden()), ValueError, "unknown backward"),
    ("unknown_solver", lambda: DEQ(solver="newton"), ValueError, "unknown solver"),
    ("unknown_backward_solver", lambda: DEQ(backward=Implicit("newton")), ValueError, "unknown solver"),
    ("unknown_solver_option", lambda: DEQ(solver=deq_core.Anderson(memory=3)), TypeError, "memory"),
    ("unknown_backward_option", lambda: Implicit(deq_core.Broyden(m=3)), TypeError, "'m'"),
    ("tol_zero", lambda: DEQ(tol=0.0), ValueError, "tol"),
    ("backward_tol_nan", lambda: Implicit(tol=float("nan")), ValueError, "tol"),
    ("max_iter_zero", lambda: DEQ(max_iter=0), ValueError, "max_iter"),
    ("backward_max_iter_float", lambda: Implicit(max_iter=2.5), ValueError, "max_iter"),
    ("stop_mode", lambda: DEQ(stop_mode="max"), ValueError, "stop_mode"),
    ("backward_stop_mode", lambda: Implicit(stop_mode="max"), ValueError, "stop_mode"),
    ("eval_tol_negative", lambda: DEQ(eval_tol=-1.0), ValueError, "tol"),
    ("eval_tol_zero", lambda: DEQ(eval_tol=0.0), ValueError, "tol"),
    ("eval_max_iter_zero", lambda: DEQ(eval_max_iter=0), ValueError, "max_iter"),
    ("eval_max_iter_float", lambda: DEQ(eval_max_iter=2.5), ValueError, "max_iter"),
    ("phantom_steps_zero", lambda: Phantom(steps=0), ValueError, "Phantom: steps"),
    ("phantom_damping_zero", lambda: Phantom(damping=0.0), ValueError, "Phantom: damping"),
    ("jacobian_samples_zero", lambda: DEQ(jacobian_samples=0), ValueError, "jacobian_samples"),
    ("on_nonfinite", lambda: DEQ(on_nonfinite="skip"), ValueError, "on_nonfinite"),
    ("warn_unconverged", lambda: DEQ(warn_unconverged="sometimes"), ValueError, "warn_unconverged"),
]


@pytest.mark.parametrize(("build", "exc", "fragment"), [c[1:] for c in DEQ_ERRORS], ids=[c[0] for c in DEQ_ERRORS])
def test_deq_rejects_bad_settings(build, exc, fragment):
    with pytest.raises(exc, match=fragment) as err:
        build()
    assert "\n" not in str(err.value)


def test_deq_rejects_bad_call_arguments():
    deq = deq_core.DEQ()
    with pytest.raises(ValueError, match="unroll"):
        deq(torch.cos, Z, unroll=0)
    with pytest.raises(ValueError, match="max_iter"):
        deq(torch.cos, Z, max_iter=0)
    with pytest.raises(ValueError, match="tol"):
        deq(torch.cos, Z, tol=-1.0)
    with pytest.raises(TypeError, match="floating-point"):
        deq(torch.cos, torch.zeros(2, 3, dtype=torch.long))


@pytest.mark.parametrize(
    "build",
    [
        lambda: deq_core.Anderson(m=0),
        lambda: deq_core.Implicit(deq_core.Broyden(memory=0)),
        lambda: deq_core.Broyden(armijo=0.9),
        lambda: deq_core.FixedPoint(damping=1.5),
    ],
)
def test_bad_solver_option_value_raises_at_construction(build):
    with pytest.raises(ValueError, match="must be"):
        build()


# --------------------------------------------------------------------------------------------------------------
# Non-finite values in the DEQ forward
# --------------------------------------------------------------------------------------------------------------


def _nan_for_sample_1(z):
    """Sample 0 converges to 2; sample 1 walks up by 1 per step and f becomes NaN past |z| = 5."""
    slope = torch.tensor([[0.5], [1.0]], dtype=z.dtype)
    return slope * z + 1.0 + 0.0 * torch.log(5.0 - z.abs())


@pytest.mark.parametrize("method", METHODS)
def test_deq_raises_on_nonfinite_by_default(method):
    deq = deq_core.DEQ(solver=method, max_iter=40, tol=1e-8, stop_mode="abs")
    with pytest.raises(FloatingPointError, match="NaN"):
        deq(_nan_for_sample_1, torch.zeros(2, 3, dtype=torch.float64))


@pytest.mark.parametrize("method", METHODS)
def test_deq_warns_on_nonfinite_and_continues(method):
    deq = deq_core.DEQ(solver=method, max_iter=40, tol=1e-8, stop_mode="abs", on_nonfinite="warn")
    with pytest.warns(RuntimeWarning, match="NaN"):
        z, info = deq(_nan_for_sample_1, torch.zeros(2, 3, dtype=torch.float64))
    assert torch.isfinite(z).all()
    assert info.nonfinite.tolist() == [False, True]
    assert info.converged.tolist() == [True, False]
    torch.testing.assert_close(z[0].detach(), torch.full((3,), 2.0, dtype=torch.float64), rtol=0, atol=1e-7)


def test_deq_ignore_nonfinite_is_silent_but_reported():
    deq = deq_core.DEQ(max_iter=40, tol=1e-8, stop_mode="abs", on_nonfinite="ignore")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        z, info = deq(_nan_for_sample_1, torch.zeros(2, 3, dtype=torch.float64))
    assert info.nonfinite.tolist() == [False, True]
    assert torch.isfinite(z).all()


def test_deq_no_warning_when_finite():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, info = deq_core.DEQ(on_nonfinite="warn")(torch.cos, torch.zeros(2, 3))
    assert not bool(info.nonfinite.any())


def test_implicit_backward_nan_raises():
    """An adjoint system that blows up (f not contractive at z*) raises instead of returning garbage gradients."""
    w = torch.tensor([[3.0]], dtype=torch.float64, requires_grad=True)
    # z -> 3 z is not contractive; its fixed point 0 is found at once from z0 = 0, but u = 3 u + g diverges
    deq = deq_core.DEQ(solver="fixed_point", backward=deq_core.Implicit("fixed_point", max_iter=2000, tol=1e-12))
    z, _ = deq(lambda z: z @ w.T, torch.zeros(2, 1, dtype=torch.float64))
    with pytest.raises(FloatingPointError, match="backward"):
        z.sum().backward()
