"""Summarize the CPU-scale language-modeling runs of ``run.sh``: one markdown table row per run directory.

    python packages/deq-lm/results/pydoc/summarize.py RUNS_DIR      # writes RUNS_DIR/summary.md and prints it

Columns: parameters; test and best validation perplexity; mean forward / backward NFE over the training steps that
solved (after the unrolled pretraining) and forward NFE on the test split; training wall time (``NAME.seconds``
written by run.sh) and tokens per second; the bytes autograd saves for one training step at the training shape
(batch x tgt_len, memory filled by a previous segment; the embedding and softmax excluded: body only), measured with
``deq_core.profiling.saved_tensor_bytes``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from statistics import mean

import torch

from deq_core.profiling import saved_tensor_bytes
from deq_core.train.metrics import read_metrics
from deq_core.train.reports import markdown_table
from deq_lm.evaluate import load_model
from deq_lm.models import count_parameters

RUNS = ("pydoc-deq-transformer", "pydoc-deq-transformer-jr", "pydoc-transformer-xl")


def body_saved_mib(run_dir: Path) -> float:
    """MiB saved for backward by the body in one training step of the run's shape (second segment, with memory)."""
    cfg, task, model, _ = load_model(run_dir)
    model.train()
    x, _ = task.train_batch(0, cfg.batch_size)
    with torch.no_grad():
        state = model(x).state
    x2, _ = task.train_batch(1, cfg.batch_size)
    embedded = model.embed(x2).detach()
    _, saved = saved_tensor_bytes(lambda: model.body(embedded, state).hidden, exclude=[*model.parameters(), embedded])
    return saved / 2**20


def summarize(run_dir: Path) -> dict[str, object]:
    records = read_metrics(run_dir / "metrics.jsonl")
    train = [r for r in records if r["split"] == "train"]
    solved = [r for r in train if r.get("mode") == "solve"]
    valid = [r for r in records if r["split"] == "valid"]
    (test,) = [r for r in records if r["split"] == "test"]
    seconds_file = run_dir.parent / f"{run_dir.name}.seconds"
    _, _, model, _ = load_model(run_dir)
    row: dict[str, object] = {
        "run": run_dir.name,
        "params": count_parameters(model),
        "test ppl": test["ppl"],
        "best valid ppl": min(r["ppl"] for r in valid),
        "train NFE fwd/bwd": (
            f"{mean(r['nfe_forward'] for r in solved):.1f} / {mean(r['nfe_backward'] for r in solved):.1f}"
            if solved and "nfe_forward" in solved[0]
            else "-"
        ),
        "test NFE": f"{test['nfe_forward']:.1f}" if "nfe_forward" in test else "-",
        "train time (s)": float(seconds_file.read_text().split()[-1]) if seconds_file.is_file() else float("nan"),
        "tokens/s": mean(r["tokens_per_s"] for r in train),
        "saved for backward (MiB)": body_saved_mib(run_dir),
    }
    return row


def markdown(rows: list[dict[str, object]]) -> str:
    def cell(value: object) -> str:
        if isinstance(value, float):
            return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"
        return f"{value:,}" if isinstance(value, int) else str(value)

    keys = list(rows[0])
    return markdown_table(keys, [[cell(row[k]) for k in keys] for row in rows])


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    torch.set_num_threads(1)
    runs_dir = Path(argv[0])
    rows = [summarize(runs_dir / name) for name in RUNS if (runs_dir / name / "metrics.jsonl").is_file()]
    table = markdown(rows)
    (runs_dir / "summary.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
