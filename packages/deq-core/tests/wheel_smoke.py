"""Run by `nox -s wheel` in an environment holding only torch and the built deq-core wheel: what
`pip install deq-core` users get. Checks the declared dependencies, then a solve and an implicit backward."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import torch

import deq_core


def main() -> None:
    requires = importlib.metadata.requires("deq-core") or []
    runtime = [r for r in requires if "extra ==" not in r]
    assert [r.split(">")[0].split("=")[0].strip() for r in runtime] == ["torch"], f"runtime deps: {runtime}"
    location = Path(deq_core.__file__).resolve()
    assert "site-packages" in location.parts, f"deq_core imported from {location}, not from the installed wheel"
    assert (location.parent / "py.typed").is_file(), "py.typed missing from the wheel"

    torch.manual_seed(0)
    weight = torch.nn.Parameter(0.3 * torch.randn(8, 8, dtype=torch.float64))
    x = torch.randn(4, 8, dtype=torch.float64)
    res = deq_core.solve(lambda z: torch.tanh(z @ weight.T + x), torch.zeros(4, 8, dtype=torch.float64))
    assert res.all_converged, res.summary()

    backward = deq_core.Implicit(max_iter=100, tol=1e-10)
    layer = deq_core.DEQ(solver="anderson", tol=1e-10, max_iter=100, backward=backward)
    z, info = layer(lambda z: torch.tanh(z @ weight.T + x), torch.zeros(4, 8, dtype=torch.float64))
    z.sum().backward()
    assert weight.grad is not None and torch.isfinite(weight.grad).all()
    assert info.nfe_backward is not None and bool(info.converged_backward.all())
    print(f"deq-core {deq_core.__version__} from {location.parent}: {res.summary()}; backward nfe {info.nfe_backward}")


if __name__ == "__main__":
    sys.exit(main())
