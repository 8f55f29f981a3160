"""Run by `nox -s wheel` in an environment holding only torch and the built deq-core wheel: what
`pip install deq-core` users get. Checks the declared dependencies, that `import deq_core` loads no training code and
that `deq_core.train` (in the wheel) asks for its extra, then a solve and an implicit backward."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from pathlib import Path

import torch

import deq_core


def main() -> None:
    requires = importlib.metadata.requires("deq-core") or []
    runtime = [r for r in requires if "extra ==" not in r]
    assert [r.split(">")[0].split("=")[0].strip() for r in runtime] == ["torch"], f"runtime deps: {runtime}"
    train = [r for r in requires if 'extra == "train"' in r]
    assert any(r.startswith("accelerate") for r in train), f"the train extra does not declare accelerate: {train}"
    location = Path(deq_core.__file__).resolve()
    assert "site-packages" in location.parts, f"deq_core imported from {location}, not from the installed wheel"
    assert (location.parent / "py.typed").is_file(), "py.typed missing from the wheel"
    _check_training_extra()

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


def _check_training_extra() -> None:
    """Without the extra, ``import deq_core.train`` fails with one line naming ``pip install 'deq-core[train]'``."""
    loaded = sorted(m for m in ("deq_core.train", "accelerate", "matplotlib", "tqdm") if m in sys.modules)
    assert not loaded, f"import deq_core loaded {loaded}"
    assert importlib.util.find_spec("accelerate") is None, "this check needs an environment without accelerate"
    try:
        import deq_core.train  # noqa: F401
    except ImportError as err:
        message = str(err)
    else:
        raise AssertionError("import deq_core.train succeeded without its extra")
    assert "pip install 'deq-core[train]'" in message and "\n" not in message, message


if __name__ == "__main__":
    sys.exit(main())
