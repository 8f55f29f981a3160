"""Nested-arithmetic sign prediction: data files, model, BCE loss, accuracy / precision / recall."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from deq_core.train import Forward
from deq_core.train.files import write_json

from ..configs.arithmetic import ArithmeticConfig
from ..data.arithmetic import VARIANTS, ensure_split, one_hot, to_indices
from ..models import any_length, build_arithmetic_model
from .base import Experiment, epoch_batch_indices, step_budget

EVAL_BATCH = 500


def data_file(data_dir: Path, seed: int, variant: str, split: str, length: int) -> Path:
    """Where the file of one (variant, split, length) lives: DATA_DIR/arith-seed{seed}/{variant}-{split}-len{L}.tsv."""
    return Path(data_dir) / f"arith-seed{seed}" / f"{variant}-{split}-len{length}.tsv"


def load_tensors(
    data_dir: Path, config: ArithmeticConfig, variant: str, split: str, n: int, length: int
) -> tuple[Tensor, Tensor]:
    """Symbol indices (N, L) and float labels (N,) of the first n rows of a file (generated when missing)."""
    seed = config.data.data_seed
    data = ensure_split(data_file(data_dir, seed, variant, split, length), n, length, variant, seed, split)
    return to_indices(data.expressions), torch.tensor(data.labels, dtype=torch.float32)


def evaluation_files(config: ArithmeticConfig, longer: bool) -> list[tuple[str, str, int]]:
    """(result key, variant, length) of every final test set: ``test_{v}`` for each variant v at ``data.length``
    symbols, and with ``longer`` also ``test_longer_{v}`` at ``data.long_length`` symbols."""
    files = [(f"test_{v}", v, config.data.length) for v in VARIANTS]
    if longer:
        files += [(f"test_longer_{v}", v, config.data.long_length) for v in VARIANTS]
    return files


def prepare_data(data_dir: Path, config: ArithmeticConfig) -> list[Path]:
    """Generate (when missing) and check every file a run of ``config`` reads: the training and validation files of
    its variant and the test sets of :func:`evaluation_files` (the longer ones when ``model.readout`` is "last").
    Runs started in parallel on one data folder should call this first, so that no two of them write the same file."""
    data = config.data
    needed = [(data.variant, "train", data.n_train, data.length)]
    needed.append((data.variant, "valid", data.n_valid, data.length))
    needed += [(v, "test", data.n_test, n) for _, v, n in evaluation_files(config, config.model.readout == "last")]
    paths = []
    for variant, split, n, length in needed:
        path = data_file(data_dir, data.data_seed, variant, split, length)
        ensure_split(path, n, length, variant, data.data_seed, split)
        paths.append(path)
    return paths


def classification_metrics(logits: Tensor, labels: Tensor) -> dict[str, float]:
    """Accuracy, precision and recall (positive class: value > 0) in percent; precision/recall are 0 when undefined."""
    pred = logits > 0
    truth = labels > 0.5
    tp = float((pred & truth).sum())
    fp = float((pred & ~truth).sum())
    fn = float((~pred & truth).sum())
    return {
        "acc": 100.0 * float((pred == truth).float().mean()),
        "precision": 100.0 * tp / (tp + fp) if tp + fp else 0.0,
        "recall": 100.0 * tp / (tp + fn) if tp + fn else 0.0,
    }


class ArithmeticExperiment(Experiment):
    """Data, model and loss of one arithmetic run (see :class:`ArithmeticConfig`)."""

    def __init__(self, config: ArithmeticConfig, data_dir: Path) -> None:
        self.config = config
        self.data_dir = Path(data_dir)
        data, optim = config.data, config.optim
        self.train_x, self.train_y = load_tensors(
            self.data_dir, config, data.variant, "train", data.n_train, data.length
        )
        self.valid_x, self.valid_y = load_tensors(
            self.data_dir, config, data.variant, "valid", data.n_valid, data.length
        )
        self.model = build_arithmetic_model(config)
        self.steps_per_epoch, self.total_steps = step_budget(
            data.n_train, optim.batch_size, optim.epochs, optim.max_steps
        )
        self.eval_every = config.run.eval_every or self.steps_per_epoch

    def batch(self, step: int) -> tuple[Tensor, Tensor]:
        idx = epoch_batch_indices(len(self.train_y), self.config.optim.batch_size, step, self.config.run.seed)
        return one_hot(self.train_x[idx]), self.train_y[idx]

    def forward(self, model: torch.nn.Module, batch: tuple[Tensor, Tensor]) -> Forward:
        x, y = batch
        logits, info = model(x)
        bce = torch.nn.functional.binary_cross_entropy_with_logits(logits, y)
        stats = {"bce": float(bce.detach()), **classification_metrics(logits.detach(), y)}
        if info is not None:
            stats["converged"] = float(info.converged.float().mean())
        return Forward(bce, stats, info)

    def baseline(self) -> str:
        """The validation accuracy of always answering the majority class of the training labels."""
        majority = float(self.train_y.mean()) >= 0.5
        acc = 100.0 * float(((self.valid_y > 0.5) == majority).float().mean())
        return f"acc {acc:.1f} % (majority class)"

    def evaluate_tensors(self, tokens: Tensor, labels: Tensor) -> dict[str, float]:
        """Loss, accuracy, precision, recall and (for DEQ / repeated models) mean NFE, residual, converged fraction."""
        self.model.eval()
        logits, nfe, residual, converged = [], [], [], []
        with torch.no_grad():
            for start in range(0, len(labels), EVAL_BATCH):
                out, info = self.model(one_hot(tokens[start : start + EVAL_BATCH]))
                logits.append(out)
                if info is not None:
                    nfe.append(float(info.nfe))
                    residual.append(info.residual)
                    converged.append(info.converged.float())
        self.model.train()
        all_logits = torch.cat(logits)
        stats = {
            "loss": float(torch.nn.functional.binary_cross_entropy_with_logits(all_logits, labels)),
            **classification_metrics(all_logits, labels),
        }
        if nfe:
            stats["nfe_forward"] = sum(nfe) / len(nfe)
            stats["residual"] = float(torch.cat(residual).mean())
            stats["converged"] = float(torch.cat(converged).mean())
        return stats

    def evaluate(self) -> dict[str, float]:
        return self.evaluate_tensors(self.valid_x, self.valid_y)

    def evaluation_sets(self) -> dict[str, tuple[Tensor, Tensor]]:
        """The final evaluation sets, whatever variant the model was trained on: ``test_{v}``, the test set of every
        variant v, and, when the model accepts other lengths (readout=last), ``test_longer_{v}``, the test set of
        every variant with ``data.long_length`` symbols."""
        cfg = self.config
        return {
            name: load_tensors(self.data_dir, cfg, variant, "test", cfg.data.n_test, length)
            for name, variant, length in evaluation_files(cfg, any_length(self.model))
        }

    def finish(self, output_dir: Path, records: list[dict[str, Any]]) -> dict[str, Any]:
        from ..plots import plot_residuals

        results: dict[str, Any] = {
            "config": "arithmetic",
            "model": self.config.model.name,
            "jacobian_weight": self.config.deq.jac_weight,
            "valid": self.evaluate(),
        }
        for name, (tokens, labels) in self.evaluation_sets().items():
            results[name] = self.evaluate_tensors(tokens, labels)
        write_json(output_dir / "results.json", results, indent=2)
        if self.config.model.name in ("deq", "repeated_gru"):
            plot_residuals({self.config.model.name: records}, output_dir / "residual.png")
        return results
