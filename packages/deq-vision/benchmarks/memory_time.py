"""Memory and time of training and inference: MDEQ, MDEQ + JR and timm's ResNet-18 / ResNet-101, in one run, as
ratios (the JR paper's Figure 6); and the NFE needed to reach the tolerance with and without JR (from trained runs).

    python packages/deq-vision/benchmarks/memory_time.py [--quick] [--batch 8] [--repeats 3] [--device cpu]
        [--runs RUN_WITHOUT_JR RUN_WITH_JR]     # e.g. the digits-mdeq and digits-mdeq-jr run directories

Memory is the size of the activations autograd saves for the backward pass (``deq_core.saved_tensor_bytes``: the
distinct storages of saved tensors with the batch as first dim, a buffer saved through several views counted once),
counted with saved-tensor hooks so that it is the same on any device (the DEQ's solver iterations keep nothing; the
adjoint solver's own buffers are not included), plus the peak CUDA memory when on a GPU. Times are medians over
``--repeats`` steps after one warm-up; absolute times on shared machines drift, the ratios less so.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

import deq_core
from deq_core.train.cli import add_device_argument
from deq_core.train.run_config import replace_config
from deq_vision.configs import Config, get_config
from deq_vision.train import build_model

# (label, preset, JR term on every step, unrolled steps or None): the CIFAR-10 models of the papers, and the MDEQ
# trained by backpropagating through its 18 iterations instead of the implicit backward (the memory DEQs avoid).
MODELS = (
    ("MDEQ-large", "cifar10-mdeq-large", False, None),
    ("MDEQ-large + JR", "cifar10-mdeq-large-jr", True, None),
    ("MDEQ-large, 18 unrolled steps", "cifar10-mdeq-large", False, 18),
    ("ResNet-18", "cifar10-resnet18", False, None),
    ("ResNet-101", "cifar10-resnet101", False, None),
)


def median_seconds(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(
    cfg: Config, jacobian: bool, batch: int, repeats: int, device: torch.device, unroll: int | None = None
) -> dict[str, float]:
    """Training step (forward + backward) and inference (no_grad forward) of the config's model; ``unroll``: train by
    backpropagating through that many applications of f instead of solving."""
    torch.manual_seed(0)
    model = build_model(cfg).to(device)
    x = torch.randn(batch, cfg.in_chans, cfg.data.image_size, cfg.data.image_size, device=device)
    y = torch.randint(0, cfg.head_classes, (batch,), device=device)

    def loss() -> Tensor:
        if cfg.is_deq:
            plan = deq_core.Plan(unroll=unroll if model.training else None, jacobian_loss=jacobian)
            with deq_core.use_plan(model, plan):
                logits, info = model(x, return_info=True)
            total = nn.functional.cross_entropy(logits, y)
            return total + cfg.deq.jac_weight * info.jacobian_loss if jacobian else total
        return nn.functional.cross_entropy(model(x), y)

    def train_step() -> None:
        model.zero_grad(set_to_none=True)
        loss().backward()

    model.train()
    activations = deq_core.saved_tensor_bytes(loss, batch_size=batch)[1]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    train_s = median_seconds(train_step, repeats)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else float("nan")
    model.eval()
    with torch.no_grad():
        infer_s = median_seconds(lambda: model(x), repeats)
    return {
        "train_s": train_s,
        "infer_s": infer_s,
        "saved_MB": activations / 2**20,
        "cuda_peak_MB": peak / 2**20,
        "params_M": sum(p.numel() for p in model.parameters()) / 1e6,
    }


def nfe_to_tolerance(run_dir: Path, tol: float, max_iter: int, n_images: int, device: torch.device) -> dict[str, float]:
    """Solve the trained MDEQ of ``run_dir`` on ``n_images`` evaluation images to ``tol`` (at most ``max_iter``
    iterations): the NFE used, and the fraction of images that reached the tolerance."""
    from torch.utils.data import DataLoader

    from deq_vision.data import build_datasets
    from deq_vision.evaluate import load_model

    cfg, model, _ = load_model(run_dir)
    model = model.to(device)
    _, eval_set = build_datasets(replace_config(cfg, {"data.eval_limit": n_images}), None)
    x = next(iter(DataLoader(eval_set, batch_size=n_images)))[0].to(device)
    with torch.no_grad():
        injection = model.stem(x)
        with deq_core.cached_weights(model):
            res = deq_core.solve(
                lambda z: model.cell(z, injection), model.initial_state(injection), solver=cfg.deq.solver,
                max_iter=max_iter, tol=tol, stop_mode=cfg.deq.stop_mode,
            )  # fmt: skip
    return {"nfe": res.nfe, "converged": float(res.converged.float().mean()), "residual": float(res.residual.mean())}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="batch 2, one repeat, solver limits of 4")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", nargs=2, type=Path, metavar=("WITHOUT_JR", "WITH_JR"), default=None)
    parser.add_argument("--tols", type=lambda t: [float(v) for v in t.split(",")], default=[1e-2, 1e-3])
    parser.add_argument("--out", type=Path, default=None, help="also write the results as JSON")
    add_device_argument(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = args.device
    batch, repeats = (2, 1) if args.quick else (args.batch, args.repeats)

    rows = {}
    for label, preset, jacobian, unroll in MODELS:
        cfg = get_config(preset)
        if args.quick and cfg.is_deq:
            cfg = replace_config(cfg, {"deq.max_iter": 4, "deq.max_iter_jitter": 0, "deq.backward_max_iter": 4})
            unroll = 4 if unroll else None
        rows[label] = measure(cfg, jacobian, batch, repeats, device, unroll)
        print(f"{label}: " + ", ".join(f"{k} {v:.4g}" for k, v in rows[label].items()), flush=True)

    base = rows["ResNet-101"]
    print(f"\nbatch {batch} at 32x32 on {device}, medians of {repeats}; ratios to ResNet-101")
    print("| model | params (M) | train step (s) | x | inference (s) | x | saved activations (MB) | x |")
    print("|---|---|---|---|---|---|---|---|")
    for label, r in rows.items():
        print(
            f"| {label} | {r['params_M']:.1f} | {r['train_s']:.3f} | {r['train_s'] / base['train_s']:.2f} | "
            f"{r['infer_s']:.3f} | {r['infer_s'] / base['infer_s']:.2f} | {r['saved_MB']:.1f} | "
            f"{r['saved_MB'] / base['saved_MB']:.2f} |"
        )
    result: dict[str, Any] = {"batch": batch, "repeats": repeats, "device": str(device), "models": rows}
    if args.runs is not None:
        nfe: dict[str, dict[str, dict[str, float]]] = {}
        for label, run in zip(("without JR", "with JR"), args.runs):
            nfe[label] = {}
            for tol in args.tols:
                nfe[label][f"{tol:g}"] = nfe_to_tolerance(run, tol, max_iter=100, n_images=128, device=device)
                print(f"NFE to reach residual {tol:g} ({label}, {run}): {nfe[label][f'{tol:g}']}", flush=True)
        result["nfe_to_tolerance"] = nfe
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
