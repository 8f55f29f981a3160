"""The JR paper's vision claims at CPU scale: ``python -m lab.vision claims --output-dir DIR``.

Run from the root of a checkout (``lab`` is not installed). Trains (resumably: finished runs are read, interrupted
ones resumed) the unregularized MDEQ, the MDEQ + JR at the gammas of the JR paper's Table 3, and a ResNet of the same
size, over several seeds, on 16x16 glyphs (:mod:`deq_vision.data.glyphs`, written to ``DIR/data`` when missing);
evaluates accuracy, inference NFE, the hard-stop table (Table 3: gamma x hard stop NFE 1..6 in the paper's
convention, our max_iter 2..7, see :data:`lab.vision.claims.CONVENTION`) and the forward residual at a fixed number of
solver steps over training (Fig. 1a, from the runs' checkpoints); writes ``DIR/claims.md`` (:mod:`lab.claims`),
``DIR/results.json``, ``DIR/hard_stop.md`` and ``DIR/residual_over_training.png``.

Subcommands:
    claims    train what is missing, evaluate, write the claims table.
    commands  print one training command per run (to run them in parallel), then the final ``claims`` command.
    restore   recreate the runs of a committed claims folder (``--from packages/deq-vision/results/claims``) in
              DIR/runs, without checkpoints: ``claims`` then reads their kept evaluations and trains only the runs
              that are missing (e.g. another seed), on another machine or in a later session.

``--quick`` is a minutes-long smoke version on a tiny glyph set (its numbers mean nothing; the tests run it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn
from torch.utils.data import DataLoader, Subset

import deq_core
from deq_core.train.checkpoints import checkpoint_weights, latest_complete_checkpoint, list_checkpoints
from deq_core.train.cli import usage_error
from deq_core.train.errors import UsageError
from deq_core.train.files import check_writable, write_bytes, write_json, write_text
from deq_core.train.metrics import read_metrics
from deq_core.train.overrides import apply_overrides
from deq_vision import train as train_module
from deq_vision.configs import Config, get_config
from deq_vision.data import build_datasets
from deq_vision.data.glyphs import META, write_glyphs
from deq_vision.evaluate import hard_stop_sweep, paper_nfe
from deq_vision.models import count_parameters
from deq_vision.train import build_model, evaluate_loader, finish_eval
from lab.claims import write_claims

from .claims import GAMMAS, SWEEP_MAX_ITER, claim_results, convention_text, hard_stop_markdown, plot_residuals

SEEDS = (0, 1, 2)
FULL_DATA = dict(n_train=20_000, n_test=5_000)
QUICK_DATA = dict(n_train=320, n_test=160)
QUICK_OVERRIDES = (
    "optim.steps=6", "deq.pretrain_steps=2", "optim.batch_size=16", "optim.warmup_steps=1", "run.eval_every=3",
    "run.save_every=2", "run.log_every=1",
)  # fmt: skip
RESIDUAL_IMAGES = {False: 1000, True: 64}  # test images for the residual-over-training curve
# Version of RUN/claims_eval.json: a cache written by another version is recomputed. 2: hard stops max_iter 1..7 (the
# paper's NFE 0..6, lab.vision.claims.CONVENTION) and the head on f(0), f(f(0)) (unrolled); 1 (no key): max_iter 1..6.
EVAL_VERSION = 2
UNROLLED = (1, 2)


@dataclasses.dataclass(frozen=True)
class Run:
    """One training run of the plan. kind: "mdeq", "jr" or "resnet"; gamma: the JR weight (JR runs)."""

    kind: str
    seed: int
    gamma: float = 0.0

    @property
    def name(self) -> str:
        return f"jr{self.gamma:g}-s{self.seed}" if self.kind == "jr" else f"{self.kind}-s{self.seed}"

    @property
    def preset(self) -> str:
        return {"mdeq": "glyphs-mdeq", "jr": "glyphs-mdeq-jr", "resnet": "glyphs-resnet"}[self.kind]

    def overrides(self, quick: bool) -> list[str]:
        extra = [f"run.seed={self.seed}"] + ([f"deq.jac_weight={self.gamma:g}"] if self.kind == "jr" else [])
        return extra + (list(QUICK_OVERRIDES) if quick else [])


def plan(seeds: Sequence[int], gammas: Sequence[float] = GAMMAS) -> list[Run]:
    """Every run the claims need: MDEQ, MDEQ + JR at each gamma, ResNet twin; each over every seed."""
    runs = [Run("mdeq", s) for s in seeds] + [Run("resnet", s) for s in seeds]
    return runs + [Run("jr", s, g) for g in gammas for s in seeds]


def train_argv(run: Run, out: Path, data_dir: Path, quick: bool, threads: int) -> list[str]:
    """Arguments of ``python -m deq_vision.train`` for ``run``, with ``--resume`` when its folder holds a complete
    checkpoint (an interrupted run continues; a new one starts at step 0)."""
    run_dir = out / "runs" / run.name
    resume = ["--resume"] if latest_complete_checkpoint(run_dir) is not None else []
    return [
        "--config", run.preset, "--data-dir", str(data_dir), "--output-dir", str(run_dir),
        "--threads", str(threads), *resume, *run.overrides(quick),
    ]  # fmt: skip


def run_config(run: Run, quick: bool) -> Config:
    return apply_overrides(get_config(run.preset), run.overrides(quick))


def is_finished(run_dir: Path, cfg: Config) -> bool:
    """Whether the run in ``run_dir`` reached its last step: its summary says so and that checkpoint exists, or its
    evaluation is kept without checkpoints (a run restored from committed results, :func:`restore_runs`)."""
    summary = run_dir / "summary.json"
    if not summary.is_file():
        return False
    done = int(json.loads(summary.read_text()).get("step", -1)) == cfg.optim.steps
    return done and (latest_complete_checkpoint(run_dir) is not None or _kept_eval(run_dir) is not None)


def _kept_eval(run_dir: Path) -> dict[str, Any] | None:
    """RUN/claims_eval.json of a finished run that has no checkpoint left (restored from committed results), if it
    was written by this :data:`EVAL_VERSION`."""
    cache = run_dir / "claims_eval.json"
    if latest_complete_checkpoint(run_dir) is not None or not cache.is_file():
        return None
    saved = json.loads(cache.read_text())
    return saved if saved.get("version") == EVAL_VERSION else None


def restore_runs(results_dir: Path, out: Path) -> list[str]:
    """Recreate OUT/runs/NAME for every run evaluated in RESULTS_DIR/results.json and RESULTS_DIR/ablation/results.json
    (a committed claims folder): its config, metrics and summary from RESULTS_DIR/run_logs/NAME and its evaluation as
    claims_eval.json, without checkpoints, so that ``claims`` reads them and trains only what is missing (e.g. more
    seeds). Runs already in OUT are left alone; returns the names restored."""
    evals: dict[str, Any] = {}
    for path in (results_dir / "ablation" / "results.json", results_dir / "results.json"):
        if path.is_file():
            evals.update(json.loads(path.read_text())["runs"])
    restored = []
    for name, evaluation in evals.items():
        logs, run_dir = results_dir / "run_logs" / name, out / "runs" / name
        if run_dir.exists() or not (logs / "summary.json").is_file():
            continue
        check_writable(run_dir)  # creates it
        for file in ("config.json", "metrics.jsonl", "summary.json"):
            if (logs / file).is_file():
                write_bytes(run_dir / file, (logs / file).read_bytes())
        write_json(run_dir / "claims_eval.json", evaluation)
        restored.append(name)
    return restored


def ensure_data(data_dir: Path, quick: bool) -> None:
    """Write the glyph set (full or quick size) unless ``data_dir`` already holds one."""
    if not (data_dir / META).is_file():
        sizes = QUICK_DATA if quick else FULL_DATA
        print(f"writing glyphs ({sizes['n_train']} train / {sizes['n_test']} test) to {data_dir}")
        write_glyphs(data_dir, **sizes)


def ensure_trained(run: Run, out: Path, data_dir: Path, quick: bool, threads: int) -> None:
    """Train ``run`` unless finished; an interrupted run resumes from its newest checkpoint."""
    if is_finished(out / "runs" / run.name, run_config(run, quick)):
        return
    code = train_module.main(train_argv(run, out, data_dir, quick, threads))
    if code != 0:
        raise RuntimeError(f"training {run.name} exited with code {code}.")


def load_weights(model: nn.Module, checkpoint: Path) -> nn.Module:
    model.load_state_dict(load_file(str(checkpoint_weights(checkpoint))))
    return model.eval()


@torch.no_grad()
def unrolled_accuracy(model: nn.Module, loader: DataLoader, steps: int, device: torch.device | None = None) -> float:
    """Top-1 % of the classifier head on f applied ``steps`` times to z0 = 0 (the plan ``deq_core.Plan(unroll=steps)``
    set on the layer, no solver; eval mode, restores the training mode): unroll 1 is what a hard stop of max_iter 1
    returns."""
    device = device or next(model.parameters()).device
    was_training = model.training
    model.eval()
    correct = count = 0
    for x, y in loader:
        with deq_core.use_plan(model, deq_core.Plan(unroll=steps)):
            logits = model(x.to(device))
        correct += int((logits.argmax(dim=1) == y.to(device)).sum())
        count += y.shape[0]
    model.train(was_training)
    return 100.0 * correct / max(count, 1)


def residual_curve(cfg: Config, run_dir: Path, loader: DataLoader, fixed_t: int) -> list[dict[str, float]]:
    """Forward relative residual after at most ``fixed_t`` solver steps (tolerance as in the config), for every
    checkpoint of the run: rows {"step", "residual", "acc"} (JR paper Fig. 1a)."""
    rows = []
    device = torch.device("cpu")
    for folder in list_checkpoints(run_dir):
        model = load_weights(build_model(cfg), folder)
        result = finish_eval(evaluate_loader(model, loader, device, max_iter=fixed_t))
        rows.append({"step": int(folder.name.split("_")[1]), "residual": result["residual"], "acc": result["acc"]})
    return rows


def evaluate_run(run: Run, out: Path, data_dir: Path, quick: bool, fixed_t: int) -> dict[str, Any]:
    """Accuracy / NFE at the config's inference limits, hard stops max_iter 1..7, the head on f(0) and f(f(0)) and
    the residual curve of a finished run; cached in RUN/claims_eval.json (recomputed when the run's last checkpoint,
    ``fixed_t`` or :data:`EVAL_VERSION` changed)."""
    run_dir = out / "runs" / run.name
    cfg = run_config(run, quick)
    final = latest_complete_checkpoint(run_dir)
    kept = _kept_eval(run_dir)
    if final is None and kept is not None and kept.get("fixed_t") == fixed_t:
        return kept
    if final is None:
        raise FileNotFoundError(f"{run_dir} has no checkpoint: train it first (see python -m lab.vision commands).")
    cache = run_dir / "claims_eval.json"
    if cache.is_file():
        saved = json.loads(cache.read_text())
        key = (saved.get("version"), saved.get("checkpoint"), saved.get("fixed_t"))
        if key == (EVAL_VERSION, final.name, fixed_t):
            return saved
    _, eval_set = build_datasets(cfg, data_dir)
    loader = DataLoader(eval_set, batch_size=250)
    model = load_weights(build_model(cfg), final)
    device = torch.device("cpu")
    result: dict[str, Any] = {
        "version": EVAL_VERSION, "checkpoint": final.name, "fixed_t": fixed_t, "parameters": count_parameters(model),
    }  # fmt: skip
    result["full"] = finish_eval(evaluate_loader(model, loader, device))
    result["test_images"] = len(eval_set)  # type: ignore[arg-type]
    if cfg.is_deq:
        result["hard_stop"] = hard_stop_sweep(model, loader, SWEEP_MAX_ITER, device)
        result["unrolled"] = [{"unroll": u, "acc": unrolled_accuracy(model, loader, u, device)} for u in UNROLLED]
        subset = Subset(eval_set, range(min(RESIDUAL_IMAGES[quick], len(eval_set))))  # type: ignore[arg-type]
        result["residual_curve"] = residual_curve(cfg, run_dir, DataLoader(subset, batch_size=250), fixed_t)
        result["train_residual"] = [
            (r["step"], r["residual"]) for r in read_metrics(run_dir / "metrics.jsonl")
            if r.get("split") == "train" and r.get("mode") == "solve" and "residual" in r
        ]  # fmt: skip
    write_json(cache, result)
    return result


def reproduce_command(
    out: Path, seeds: Sequence[int], quick: bool, data_dir: Path | None, gammas: Sequence[float] = GAMMAS
) -> str:
    parts = ["python", "-m", "lab.vision", "claims", "--output-dir", str(out)]
    parts += ["--seeds", *map(str, seeds)] + (["--data-dir", str(data_dir)] if data_dir else [])
    if sorted(gammas) != sorted(GAMMAS):
        parts += ["--gammas", *(f"{g:g}" for g in gammas)]
    return shlex.join(parts + (["--quick"] if quick else []))


def print_commands(
    out: Path,
    data_dir: Path,
    seeds: Sequence[int],
    quick: bool,
    threads: int,
    given: bool,
    gammas: Sequence[float] = GAMMAS,
) -> None:
    """One line per step: write the data, one training command per run, then the claims command."""
    sizes = QUICK_DATA if quick else FULL_DATA
    print(shlex.join(["python", "-m", "deq_vision.data", "glyphs", "--output-dir", str(data_dir),
                      "--train", str(sizes["n_train"]), "--test", str(sizes["n_test"])]))  # fmt: skip
    for run in plan(seeds, gammas):
        print(shlex.join(["python", "-m", "deq_vision.train", *train_argv(run, out, data_dir, quick, threads)]))
    print(reproduce_command(out, seeds, quick, data_dir if given else None, gammas))


def claims(
    out: Path,
    data_dir: Path,
    seeds: Sequence[int],
    quick: bool,
    threads: int,
    given: bool,
    gammas: Sequence[float] = GAMMAS,
) -> str:
    """Train what is missing, evaluate every run, write the claims table and its companions; return claims.md."""
    ensure_data(data_dir, quick)
    runs = plan(seeds, gammas)
    for run in runs:
        ensure_trained(run, out, data_dir, quick, threads)
    fixed_t = get_config("glyphs-mdeq").deq.max_iter  # the unregularized MDEQ's training limit (Fig. 1a: T fixed)
    evals = {run.name: evaluate_run(run, out, data_dir, quick, fixed_t) for run in runs}
    command = reproduce_command(out, seeds, quick, data_dir if given else None, gammas)
    pretrain = run_config(runs[0], quick).deq.pretrain_steps
    jr_limit = get_config("glyphs-mdeq-jr").deq.eval_max_iter or get_config("glyphs-mdeq-jr").deq.max_iter
    results, summary = claim_results(runs, evals, command, pretrain, jr_limit=jr_limit)
    write_json(out / "results.json", {"summary": summary, "runs": evals})
    table = hard_stop_markdown(runs, evals)
    write_text(out / "hard_stop.md", table)
    plot_residuals(runs, evals, fixed_t, out / "residual_over_training.png")
    preamble = preamble_text(seeds, quick, evals, fixed_t) + "\n\n" + convention_text(runs, evals, jr_limit)
    preamble += "\n\nHard-stop table (JR paper Table 3 layout), top-1 %:\n\n" + table
    return write_claims(out / "claims.md", results, title="deq-vision: JR paper claims at CPU scale", preamble=preamble)


def preamble_text(seeds: Sequence[int], quick: bool, evals: dict[str, Any], fixed_t: int) -> str:
    """The claims table's preamble: data, seeds, the three presets' solver limits (max_iter = calls of f; the
    paper's NFE is one less) and the residual figure's fixed T."""
    n_test = next(iter(evals.values()))["test_images"]
    m, j = get_config("glyphs-mdeq"), get_config("glyphs-mdeq-jr")
    j_eval = j.deq.eval_max_iter or j.deq.max_iter
    scale = "QUICK SMOKE RUN (tiny data, a few steps): the numbers mean nothing." if quick else ""
    stop = {"batch": "the residual of the whole batch (the authors' rule)", "sample": "each sample's own residual"}
    return (
        f"{scale} Data: procedurally drawn 16x16 glyphs (`deq_vision.data.glyphs`), {n_test} test images. Seeds "
        f"{list(seeds)}; numbers are mean ± sample std over seeds. Solver limits are our max_iter (calls of f, the "
        f"one at z0 included; the paper's NFE is one less, see below). MDEQ (`{m.model.name}`): {m.deq.solver}, "
        f"max_iter {m.deq.max_iter} / {m.deq.backward_max_iter} in training (forward / backward), inference to "
        f"relative residual {m.deq.tol:g} (limit max_iter {m.deq.eval_max_iter}); solves stop on "
        f"{stop[m.deq.stop_over]}. MDEQ + JR: max_iter "
        f"{j.deq.max_iter} / {j.deq.backward_max_iter} in training, hard stop max_iter {j_eval} at inference (paper "
        f"NFE {paper_nfe(j_eval):g}), JR probability "
        f"{j.deq.jac_prob:g} with {j.deq.jacobian_samples} Hutchinson probes, gamma as named. The residual figure "
        "(`residual_over_training.png`) evaluates every "
        f"checkpoint at a fixed max_iter {fixed_t} (paper convention T = {paper_nfe(fixed_t):g}; Fig. 1a uses "
        "T = 14)."
    ).strip()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lab.vision", description=__doc__.splitlines()[0])
    parser.add_argument(
        "what", choices=("claims", "commands", "restore"),
        help="claims: run everything; commands: print them; restore: recreate the runs of a committed claims folder "
        "(--from) in DIR/runs without checkpoints, so that claims trains only what is missing",
    )  # fmt: skip
    parser.add_argument("--from", dest="source", type=Path, default=None, help="restore: a committed claims folder")
    parser.add_argument("--output-dir", type=Path, required=True, help="runs go to DIR/runs/NAME, tables to DIR")
    parser.add_argument("--data-dir", type=Path, default=None, help="the glyph set (default DIR/data, written)")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help=f"default {list(SEEDS)} ([0] if --quick)")
    parser.add_argument("--quick", action="store_true", help="tiny data, a few steps: a smoke test")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per training (default 1)")
    parser.add_argument(
        "--gammas", type=float, nargs="+", default=list(GAMMAS),
        help=f"JR weights trained (default {list(GAMMAS)}, Table 3's; the ablation row needs all of them)",
    )  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    seeds = args.seeds if args.seeds is not None else ([0] if args.quick else list(SEEDS))
    if args.threads < 1 or len(set(seeds)) != len(seeds):
        return usage_error(parser.prog, "--threads must be >= 1 and --seeds distinct.")
    data_dir = args.data_dir or args.output_dir / "data"
    given = args.data_dir is not None
    if args.what == "restore":
        if args.source is None or not (args.source / "results.json").is_file():
            return usage_error(parser.prog, "restore needs --from DIR with a results.json (a claims folder).")
        names = restore_runs(args.source, args.output_dir)
        print(f"restored {len(names)} runs into {args.output_dir / 'runs'}: {', '.join(names) or '-'}")
        return 0
    if args.what == "commands":
        print_commands(args.output_dir, data_dir, seeds, args.quick, args.threads, given, args.gammas)
        return 0
    torch.set_num_threads(args.threads)
    try:
        text = claims(args.output_dir, data_dir, seeds, args.quick, args.threads, given, args.gammas)
    except (UsageError, FileNotFoundError) as err:
        return usage_error(parser.prog, err)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
