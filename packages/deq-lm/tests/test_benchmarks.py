"""The benchmarks in packages/deq-lm/benchmarks: their measurements on tiny models, and their ``--quick`` paths run as
scripts (what ``nox -s bench -- --quick`` runs). Each test takes seconds on one thread."""

from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from safetensors.torch import save_model

from conftest import subprocess_env
from deq_core.train.checkpoints import atomic_checkpoint_dir
from deq_core.train.run_config import replace_config, save_config
from deq_lm.configs import get_config
from deq_lm.models import build_model
from deq_lm.problems import build_problem

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
# Small widths for the pydoc presets of the speed benchmark (a few seconds per model).
SMALL = ["d_embed=16", "d_model=16", "n_heads=2", "d_head=8", "d_ff=32", "tgt_len=12", "mem_len=12", "batch_size=4"]


def load_script(name: str) -> ModuleType:
    """Import benchmarks/<name>.py under a unique module name (its helper module _lm_bench sits beside it)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(f"deq_lm_bench_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is being made
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def memory() -> ModuleType:
    return load_script("memory")


@pytest.fixture(scope="module")
def speed() -> ModuleType:
    return load_script("speed")


def run_script(name: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / f"{name}.py"), *args], env=subprocess_env(), capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


# --------------------------------------------------------------------------------------------------------------------
# memory.py


def small_protocol(memory: ModuleType, **changes: object) -> object:
    return dataclasses.replace(memory.Protocol(tgt_len=20, batch=3), **changes)


@pytest.mark.parametrize("preset", ["tiny-wt103-deq-transformer-small", "tiny-ptb-deq-trellisnet"])
def test_deq_saved_bytes_do_not_depend_on_the_iteration_limit(memory: ModuleType, preset: str) -> None:
    proto = small_protocol(memory)
    cfg = get_config(preset)
    low, high = memory.measure_deq(cfg, proto, 2), memory.measure_deq(cfg, proto, 6)
    # the second runs more iterations, forward and backward (counted by the solves, not assumed from the limits)
    assert low.nfe[0] < high.nfe[0] and low.nfe[1] < high.nfe[1]
    assert low.saved == high.saved > 0
    assert high.step_peak >= high.saved
    # solver histories are allocated at the start, sized by min(m or memory, max_iter): the solve's peak grows by
    # the larger history (and its small float64 matrices, within the 10 %) only
    assert high.solve_peak <= 1.1 * (low.solve_peak + high.histories[0] - low.histories[0])


def test_jacobian_term_saves_more(memory: ModuleType) -> None:
    proto = small_protocol(memory)
    cfg = get_config("tiny-wt103-deq-transformer-postln-jr")
    plain, with_jr = memory.measure_deq(cfg, proto, 3), memory.measure_deq(cfg, proto, 3, jacobian=True)
    assert with_jr.saved > plain.saved


@pytest.mark.parametrize("preset", ["tiny-wt103-transformer-xl-small-4", "tiny-wt103-transformer-tied-16"])
def test_twin_saved_bytes_grow_linearly_with_depth(memory: ModuleType, preset: str) -> None:
    proto = small_protocol(memory)
    cfg = get_config(preset)
    one, two, four = (memory.measure_twin(cfg, proto, depth).saved for depth in (1, 2, 4))
    assert 0 < one < two < four
    assert four - two == 2 * (two - one)  # every layer saves the same


@pytest.mark.parametrize("preset", ["tiny-wt103-transformer-xl-medium-16", "tiny-ptb-trellisnet-60"])
def test_twin_on_meta_counts_what_it_counts_on_cpu(memory: ModuleType, preset: str) -> None:
    cfg = get_config(preset)
    on_meta = memory.measure_twin(cfg, small_protocol(memory))
    on_cpu = memory.measure_twin(cfg, small_protocol(memory, twin_device=torch.device("cpu")))
    assert (on_meta.saved, on_meta.step_peak) == (on_cpu.saved, on_cpu.step_peak)
    assert on_meta.saved > 0


def test_memory_quick_script(tmp_path: Path) -> None:
    out = tmp_path / "memory.md"
    only = ["wt103-deq-transformer-small", "ptb-deq-trellisnet"]
    proc = run_script("memory", "--quick", "--tgt-len", "30", "--batch", "4", "--only", *only, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "| DEQ | DEQ limit | explicit twin | twin saved | DEQ saved | reduction (saved) |" in proc.stdout
    assert "Saved bytes independent of the iteration limit: yes" in proc.stdout
    assert "grow with every added layer: yes" in proc.stdout
    text = out.read_text()
    assert text.startswith("Command: `OMP_NUM_THREADS=1 python packages/deq-lm/benchmarks/memory.py --quick")
    rows = [line for line in text.splitlines() if line.startswith("| wt103-deq-transformer-small | 22 | wt103-")]
    assert len(rows) == 2  # against the 4-layer and the weight-tied 16-layer Transformer-XL
    for row in rows:
        assert 0 < float(row.split("|")[6].strip().rstrip("%")) < 100  # the saved-bytes reduction


# --------------------------------------------------------------------------------------------------------------------
# speed.py


def test_speed_quick_script(tmp_path: Path) -> None:
    out = tmp_path / "speed.md"
    proc = run_script("speed", "--quick", "--set", *SMALL, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    for label in ("| DEQ |", "| DEQ + JR |", "| TXL 4 layers |", "| TXL 18 layers |", "expected (term with p = 0.4)"):
        assert label in proc.stdout
    assert "freshly initialized" in proc.stdout
    assert out.read_text().startswith("Command: ")


def fake_run(run_dir: Path, preset: str, seed: int) -> None:
    """A run directory as training leaves it (config.json, checkpoints/step_N/model.safetensors), untrained."""
    cfg = get_config(preset)
    from deq_core.train.overrides import apply_overrides

    cfg = apply_overrides(cfg, SMALL)
    torch.manual_seed(seed)
    model = build_model(cfg, build_problem(cfg).vocab_size)
    save_config(cfg, run_dir, preset)
    with atomic_checkpoint_dir(run_dir, 3) as ckpt:
        ckpt.save_with("model.safetensors", lambda path: save_model(model, str(path)))


def test_speed_loads_runs(speed: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = [tmp_path / "deq", tmp_path / "deq-jr", tmp_path / "txl"]
    for run, preset in zip(runs, ["pydoc-deq-transformer", "pydoc-deq-transformer-jr", "pydoc-transformer-xl"]):
        fake_run(run, preset, seed=1)
    assert speed.main(["--repeats", "1", "--runs", *map(str, runs)]) == 0
    stdout = capsys.readouterr().out
    for label in ("| deq |", "| deq-jr + JR |", "| deq-jr, no term |", "| txl |", "| TXL 18 layers |"):
        assert label in stdout
    assert "deq-jr @ step_0000003" in stdout
    assert "trained checkpoints" in stdout


def test_expected_jr_time_mixes_with_the_probability(speed: ModuleType) -> None:
    cfg = replace_config(get_config("pydoc-deq-transformer-jr"), {"deq.jac_prob": 0.25})
    model = object()
    with_term = speed.Entry("jr", cfg, model, True, "fresh", train_s=[4.0], infer_s=[1.0])
    without = speed.Entry("no term", cfg, model, False, "fresh", train_s=[2.0], infer_s=[1.0])
    label, train, infer = speed.expected_jr([with_term, without])
    assert train == pytest.approx(0.25 * 4.0 + 0.75 * 2.0)
    assert infer == 1.0 and "p = 0.25" in label


def _solve_peak(solver: str, options: dict, tol: float, max_iter: int, batch: int, dim: int) -> tuple[int, int]:
    """Peak live bytes of a no-grad solve of a map with a spread of Jacobian eigenvalues, and the iterations it ran
    (counted by the solve, not assumed: an ordinary tol may stop it before max_iter, and an unreachable one such as
    1e-30 does not force max_iter either, since a residual can round to exactly 0 on some CPUs)."""
    import deq_core

    rates = torch.linspace(0.3, 0.95, dim)
    z0 = torch.zeros(batch, dim)
    result = []

    def run() -> None:
        f = lambda z: torch.sin(rates * z) + 1.0
        result.append(deq_core.solve(f, z0, solver=solver, max_iter=max_iter, tol=tol, **options))

    with torch.no_grad():
        peak = deq_core.peak_live_bytes(run)[1]
    return peak, result[0].iterations


@pytest.mark.parametrize(
    "solver, small, large", [("broyden", {"memory": 4}, {"memory": 8}), ("anderson", {"m": 5}, {"m": 9})]
)
def test_history_bytes_match_what_the_solver_allocates(
    memory: ModuleType, solver: str, small: dict, large: dict
) -> None:
    """The benchmark's count of solver history buffers against the peak of live tensors of real solves (vectors of
    2 x 20000 floats). Starting histories: the peaks of two solves that differ only in the history size differ by
    the count's difference, exactly. Broyden's rank-reduced base (from iteration memory + 2 on): a solve past it
    peaks higher than one before it by the base, less at most the two transient iterates that the shorter solve's
    peak moment holds and the steady state after the reduction does not; Anderson's peak does not grow."""
    batch, dim = 2, 20_000
    vector = batch * dim * 4
    count = memory.history_bytes
    limit = 12  # >= m and memory: the buffers are not capped by max_iter, their size is the option's
    # short solves (a loose tol, stopping after a few iterations) and a long one (tol 1e-5, past Broyden's reduction)
    (peak_large, n_large), (peak_small, n_small) = (
        _solve_peak(solver, o, 0.05, limit, batch, dim) for o in (large, small)
    )
    start = peak_large - peak_small
    expected = count(solver, large, vector, n_large, limit) - count(solver, small, vector, n_small, limit)
    assert abs(start - expected) < vector / 20  # + small float64 matrices
    peak_long, n_long = _solve_peak(solver, small, 1e-5, limit, batch, dim)
    assert n_small < n_long
    grown = peak_long - peak_small
    added = count(solver, small, vector, n_long, limit) - count(solver, small, vector, n_small, limit)
    assert added - 2 * vector - vector / 20 <= grown <= added + vector / 20
    assert (added > 0) == (solver == "broyden")


def test_history_bytes_of_broyden_default_memory(memory: ModuleType) -> None:
    """deq-core's default Broyden keeps every update: max_iter + 1 directions, never a reduced base."""
    limit, vector = 12, 8 * 100
    peak = _solve_peak("broyden", {}, 1e-5, limit, 2, 100)[0]
    assert memory.history_bytes("broyden", {}, vector, 11, limit) == (limit + 1) * vector
    assert peak >= (limit + 1) * vector
    with pytest.raises(ValueError, match="give max_iter"):
        memory.history_bytes("broyden", {}, vector, 11)


# --------------------------------------------------------------------------------------------------------------------
# --device (every script)

SCRIPTS = sorted(p.stem for p in BENCHMARKS.glob("[!_]*.py"))  # what nox -s bench runs


@pytest.mark.parametrize("script", SCRIPTS)
def test_missing_gpu_is_a_one_line_error(script: str) -> None:
    """``--device cuda`` without a GPU (CUDA_VISIBLE_DEVICES="" for the subprocess): argparse's one-line error."""
    env = dict(subprocess_env(), CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / f"{script}.py"), "--device", "cuda", "--quick"], env=env,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        f"{script}.py: error: argument --device: device 'cuda' is not available: this machine has no CUDA GPU; "
        "use --device cpu"
    )
