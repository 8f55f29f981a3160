"""Reproduce the papers' language-modeling claims at CPU scale and write the claims table.

    python -m lab.lm claims --output-dir DIR [--data-dir CORPUS] [--seeds 0 1 2] [--quick]
    python -m lab.lm commands --output-dir DIR [--data-dir CORPUS] [--seeds 0] [--quick]
    python -m lab.lm plan --output-dir DIR [--data-dir CORPUS] [--quick]
    python -m lab.lm restore --from packages/deq-lm/results/claims/run_logs --output-dir DIR

Run from the repository's root (``lab`` is not installed with deq-lm).

``claims`` trains every run the claims need (``pdocs-*`` presets, ``deq_lm.configs.pythondocs``) in
``DIR/runs/PRESET-seedS`` with ``deq_lm.train`` (a finished run is read, an interrupted one resumed from its latest
checkpoint), then measures test perplexity and inference NFE (the runs' final test evaluation), non-embedding parameters
and the activations one training step saves for backward (``deq_core.profiling.saved_tensor_bytes``; both on a model of
the run's config: they do not depend on its weights), and each DEQ run's training step relative to a fresh
Transformer-XL twin's (``step_timing``, interleaved in one process while the run's checkpoint exists; kept in
``RUN/step_time.json``), and the runtime rows of the DEQ paper's Table 4 against the deep networks the paper divides
by (:func:`runtime_configs`, :func:`runtime`, on fresh models: the DEQ-Transformer against an 18-layer Transformer-XL
of the twin's width, the DEQ's FFN widened until the two have equal non-embedding parameters; the DEQ-TrellisNet
against its cell unrolled 70 times; the DEQ's solver held to the iterations its run logged; training and inference
steps timed interleaved), and writes ``DIR/claims.md`` (``lab.claims``), ``DIR/claims.json``, ``DIR/ppl_vs_nfe.png``
and ``DIR/copy400_loss.png``. It also trains the Transformer-XL twin with the seeds ``claims.SPREAD_SEEDS`` (its runs
are the cheapest): their test perplexities measure one seed's spread, against which the perplexity rows weigh their
distance from the threshold (``claims.json``: seed_spread), and the copy-memory runs at T = 400 (``copy400``: five
models, three seeds, no corpus), whose rows are read from their logs. ``commands`` prints one ``deq_lm.train``
command per run, to start them in parallel; ``claims`` then reads them. ``plan`` times one training step of every
language-model run on a fresh model (the DEQs forced to their iteration limits) and prints the training time each
implies. ``restore`` copies committed run logs (config, metrics, step record; no checkpoints) into DIR/runs, so that
runs trained in different sessions or on different machines make one table: ``claims`` reads them as finished runs.

The corpus: ``--data-dir`` (train.txt, valid.txt, test.txt), or by default the Python documentation corpus written
to ``DIR/corpus`` from the installed ``python3.11-doc`` package (``deq_lm.data.pythondocs_corpus``). ``--quick``: tiny
models and a few dozen steps on the same runs (a smoke test of the whole pipeline, about a minute on a small corpus;
its verdicts mean nothing).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from deq_core.profiling import saved_tensor_bytes
from deq_core.train.checkpoints import latest_complete_checkpoint
from deq_core.train.cli import usage_error
from deq_core.train.deq_config import deq_settings
from deq_core.train.errors import UsageError
from deq_core.train.files import check_writable, write_bytes, write_json, write_text
from deq_core.train.metrics import read_metrics
from deq_core.train.reports import markdown_table
from deq_core.train.run_config import check_resume_config, flat_dict, replace_config
from deq_lm.configs import Config, get_config
from deq_lm.configs.pythondocs import (
    JR_SETTINGS,
    PLATEAU32_MODELS,
    PLATEAU32_PREFIX,
    PREFIX,
    TRELLIS_MODELS,
    TRELLIS_PREFIX,
)
from deq_lm.data.pythondocs_corpus import write_pythondocs_corpus
from deq_lm.evaluate import SWEEP_FILE, load_model
from deq_lm.models import SequenceModel, build_model, count_parameters
from deq_lm.problems import Problem, build_problem
from deq_lm.train import RESUMABLE_CHANGES, train
from lab.claims import Claim, ClaimResult, mean_spread, read_earlier, write_claims

from . import claims as lc
from . import copy400
from .step_timing import TimedEntry, expected_seconds, time_inference_steps, time_training_steps

DEQ, TXL, TIED = f"{PREFIX}-deq-transformer", f"{PREFIX}-transformer-xl", f"{PREFIX}-transformer-tied"
JR = tuple(f"{PREFIX}-deq-transformer-{name}" for name in JR_SETTINGS)
# Claim 4 again on narrower models trained to a plateau: width 32 (the width-64 try, presets pdocs-plateau-*, did not
# reach the plateau rule; its run logs and numbers stay in docs/deq-lm-claims.md).
PLATEAU_DEQ, PLATEAU_TXL, PLATEAU_TIED = (f"{PLATEAU32_PREFIX}-{name}" for name in PLATEAU32_MODELS)
# DEQ-TrellisNet against the same cell unrolled to a fixed depth, both trained to a plateau.
TRELLIS_DEQ, TRELLIS_TWIN = (f"{TRELLIS_PREFIX}-{name}" for name in TRELLIS_MODELS)
PRESETS = (DEQ, TXL, TIED, *JR, PLATEAU_DEQ, PLATEAU_TXL, PLATEAU_TIED, TRELLIS_DEQ, TRELLIS_TWIN)


@dataclasses.dataclass(frozen=True)
class RuntimePair:
    """One pair of the DEQ paper's Table 4. ``deq``: the DEQ run whose logged iterations the timed DEQ makes.
    ``twin``: the preset whose layer the deep network repeats ``layers`` times (only its config is used: no run).
    ``widen``: the DEQ's FFN is widened until its non-embedding parameters equal the deep network's (the
    DEQ-Transformer, as the paper sizes it); without it the DEQ keeps its run's config (the TrellisNet ties its
    weights across depth, so the unrolled cell has the DEQ's parameters at any depth). ``claims``: the training and
    inference rows."""

    deq: str
    twin: str
    layers: int
    widen: bool
    claims: tuple[Claim, Claim]


RUNTIME_PAIRS = (
    RuntimePair(DEQ, TXL, lc.RUNTIME_TXL_LAYERS, True, (lc.RUNTIME_TXL_TRAIN, lc.RUNTIME_TXL_INFERENCE)),
    RuntimePair(TRELLIS_DEQ, TRELLIS_TWIN, lc.RUNTIME_TRELLIS_LAYERS, False,
                (lc.RUNTIME_TRELLIS_TRAIN, lc.RUNTIME_TRELLIS_INFERENCE)),
)  # fmt: skip

TIMING_REPEATS = {False: 7, True: 1}
STEP_RECORD = "step_time.json"  # RUN/step_time.json: the run's training step vs a fresh Transformer-XL twin's
# The table measured with the models before they were matched to the authors' code: each rebuilt row shows its verdict.
EARLIER_TABLE = Path(__file__).resolve().parents[2] / "packages/deq-lm/results/claims/before/claims.md"
KEPT_FILES = ("config.json", "metrics.jsonl", STEP_RECORD, "training.png", SWEEP_FILE, "sweep.png")

# --quick: every preset at test size (the DEQ's FFN still widened to match the 4-layer twin's parameters).
_QUICK = dict(
    d_embed=16, d_model=16, n_heads=2, d_head=8, tgt_len=16, mem_len=16, eval_tgt_len=16, batch_size=4,
    eval_batch_size=2, vocab_size=0, steps=24, warmup_steps=2, eval_every=12, log_every=4, save_every=12,
    **deq_settings(pretrain_steps=4, eval_max_iter=12),
)  # fmt: skip
# The twins' FFN; the DEQ cells (DEQ, tied, JR, plateau): 240 wide, 10,512 vs 10,592 body parameters.
_QUICK_FFN = {TXL: 32, PLATEAU_TXL: 32, TIED: 240}


def earlier_keys() -> list[str]:
    """The claim keys of the earlier table's rows, in order (the verdicts its claims.json saved beside it)."""
    return list(json.loads(EARLIER_TABLE.with_name("claims.json").read_text())["verdicts"])


def run_config(preset: str, seed: int, data_dir: Path, quick: bool) -> Config:
    """The config of one run: the preset, its seed and corpus folder (and the --quick sizes)."""
    cfg = replace_config(get_config(preset), {"run.seed": seed, "data.data_dir": str(data_dir)})
    if quick:
        changes = dict(_QUICK, d_ff=_QUICK_FFN.get(preset, _QUICK_FFN[TIED]))
        if not cfg.is_deq:
            changes.pop("deq.pretrain_steps")
        cfg = replace_config(cfg, changes)
    return cfg


def run_dir(output_dir: Path, preset: str, seed: int) -> Path:
    return output_dir / "runs" / f"{preset}-seed{seed}"


def train_command(
    output_dir: Path, preset: str, seed: int, data_dir: Path, quick: bool, *, resume: bool = False
) -> str:
    """The shell command that trains one run exactly as ``claims`` would; ``resume``: with ``--resume`` (continue
    the run's latest checkpoint, which must exist)."""
    return config_command(preset, run_config(preset, seed, data_dir, quick), run_dir(output_dir, preset, seed), resume)


def config_command(preset: str, cfg: Config, folder: Path, resume: bool = False) -> str:
    """The shell command that trains ``cfg`` (preset ``preset`` and the settings that differ from it) in ``folder``,
    on one thread; ``--data-dir`` when the config names a corpus folder."""
    base_settings = flat_dict(get_config(preset))
    changed = {k: v for k, v in flat_dict(cfg).items() if k != "data.data_dir" and v != base_settings[k]}
    words = ["python", "-m", "deq_lm.train", "--config", preset]
    if cfg.data.data_dir:
        words += ["--data-dir", cfg.data.data_dir]
    words += ["--output-dir", str(folder), "--threads", "1"]
    if resume:
        words.append("--resume")
    words += [f"{k}={_value(v)}" for k, v in changed.items()]
    return "OMP_NUM_THREADS=1 " + shlex.join(words)


def _value(value: object) -> str:
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def finished(folder: Path, cfg: Config) -> bool:
    """Whether ``folder`` holds a run that trained all ``cfg.optim.steps`` and logged its test evaluation."""
    steps = cfg.optim.steps
    return any(r.get("split") == "test" and r.get("step") == steps for r in read_metrics(folder / "metrics.jsonl"))


def ensure_run(cfg: Config, folder: Path, name: str) -> None:
    """Train the run in ``folder`` unless it is finished; an interrupted run resumes from its latest checkpoint. A run
    of another config in ``folder`` is refused (ResumeConfigError), finished or not."""
    check_resume_config(folder, cfg, RESUMABLE_CHANGES)
    if finished(folder, cfg):
        print(f"{name}: finished run found in {folder}")
        return
    train(cfg, folder, name=name, resume=latest_complete_checkpoint(folder) is not None)
    if not finished(folder, cfg):
        raise RuntimeError(f"{name} in {folder} stopped before step {cfg.optim.steps}; rerun to resume it.")


def saved_activation_bytes(model: SequenceModel, problem: Problem, cfg: Config) -> int:
    """Bytes of activations the body saves for backward in one training step (second training segment, after the
    memory of the first; tensors whose first dim is the batch: parameters and weights derived from them excluded)."""
    model.train()
    batch_size = cfg.optim.batch_size
    x, _ = problem.train_batch(0, batch_size)
    with torch.no_grad():
        state = model(x).state
    x2, _ = problem.train_batch(1, batch_size)
    embedded = model.embed(x2).detach()
    _, saved = saved_tensor_bytes(
        lambda: model.body(embedded, state).hidden, exclude=[*model.parameters(), embedded], batch_size=batch_size
    )
    return saved


def test_record(folder: Path) -> dict[str, float]:
    """The final test evaluation logged by the run in ``folder``."""
    tests = [r for r in read_metrics(folder / "metrics.jsonl") if r.get("split") == "test"]
    if not tests:
        raise RuntimeError(f"no test evaluation in {folder / 'metrics.jsonl'}.")
    return tests[-1]


def read_sweep(run_dir: Path) -> dict[int, float]:
    """Test perplexity by inference iteration limit from RUN_DIR/sweep.json (written by ``python -m deq_lm.evaluate
    --checkpoint RUN_DIR --split test --max-iters ...``); empty when the run has no test-split sweep."""
    path = Path(run_dir) / SWEEP_FILE
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return {int(row["max_iter"]): float(row["ppl"]) for row in data.get("rows", []) if data.get("split") == "test"}


def fresh_model(cfg: Config, problem: Problem) -> SequenceModel:
    """A model of ``cfg`` with its seed's initial weights (parameter counts and saved activations do not depend on the
    weights, so a finished run needs no checkpoint for them)."""
    torch.manual_seed(cfg.run.seed)
    return build_model(cfg, problem.vocab_size)


def measure(preset: str, cfgs: Sequence[Config], folders: Sequence[Path], problem: Problem) -> lc.Measured:
    """Test ppl and NFE of every seed's run (its logged final test evaluation), parameters and saved activations of
    a model of the first seed's config."""
    tests = [test_record(f) for f in folders]
    model = fresh_model(cfgs[0], problem)
    valid = [r for r in read_metrics(folders[0] / "metrics.jsonl") if r["split"] == "valid"]
    return lc.Measured(
        label=preset.removeprefix(f"{PREFIX}-"),
        ppl=tuple(float(t["ppl"]) for t in tests),
        nfe=tuple(float(t.get("nfe_forward", 0.0)) for t in tests),
        params=count_parameters(model.body),
        saved_bytes=saved_activation_bytes(model, problem, cfgs[0]),
        layers=1 if cfgs[0].is_deq else cfgs[0].model.n_layers,  # tracked layer applications per step
        valid_ppl=tuple(float(r["ppl"]) for r in valid),
        valid_steps=tuple(int(r["step"]) for r in valid),
    )


def run_row(m: lc.Measured, folder: Path, tokens_per_step: int) -> list[object]:
    """One row of the runs table (first seed's curves): valid ppl at each evaluation, test ppl and NFE, the last
    logged training NFE, non-embedding parameters, saved activations and the training wall time in minutes (summed
    from the logged tokens/s, evaluations excluded)."""
    records = read_metrics(folder / "metrics.jsonl")
    valid = " / ".join(f"{r['ppl']:.1f}" for r in records if r.get("split") == "valid")
    train = [r for r in records if r.get("split") == "train"]
    seconds, previous = 0.0, 0
    for r in train:  # tokens_per_s covers the steps since the previous record
        seconds += (r["step"] - previous) * tokens_per_step / max(float(r["tokens_per_s"]), 1e-9)
        previous = r["step"]
    last = train[-1] if train else {}
    nfe = f"{last['nfe_forward']:.1f} / {last.get('nfe_backward', 0):.1f}" if "nfe_forward" in last else "-"
    return [m.label, f"{m.params:,}", mean_spread(m.ppl, 4), f"{m.mean_nfe:.1f}" if m.mean_nfe else "-", valid, nfe,
            f"{m.saved_bytes / 2**20:.1f}", f"{seconds / 60:.1f}"]  # fmt: skip


def runs_table(measured: dict[str, lc.Measured], folders: dict[str, list[Path]], tokens_per_step: int) -> str:
    """Markdown table of every run (the preamble of claims.md)."""
    rows = [run_row(m, folders[preset][0], tokens_per_step) for preset, m in measured.items()]
    header = ["run", "non-embedding params", "test ppl", "inference NFE", "valid ppl at each evaluation",
              "last training NFE fwd / bwd", "saved activations (MiB)", "training wall time (min)"]  # fmt: skip
    return markdown_table(header, rows)


def step_times(
    models: dict[str, SequenceModel], configs: dict[str, Config], problem: Problem, repeats: int
) -> dict[str, lc.StepTime]:
    """Median training-step seconds of the unregularized DEQ and every JR setting, timed interleaved in this process;
    a JR setting's time is the expectation over its term's probability (with and without the term timed)."""
    entries: dict[str, TimedEntry] = {}
    for label, model in models.items():
        cfg = configs[label]
        entries[label] = TimedEntry(label, cfg, model, jacobian=False)
        if cfg.deq.jac_weight > 0:
            entries[label + "+term"] = TimedEntry(label + "+term", cfg, model, jacobian=True)
    cfg = next(iter(configs.values()))
    first, second = problem.train_batch(0, cfg.optim.batch_size), problem.train_batch(1, cfg.optim.batch_size)
    time_training_steps(list(entries.values()), first, second, repeats)
    times = {}
    for label in models:
        plain, p = entries[label], configs[label].deq.jac_prob if configs[label].deq.jac_weight > 0 else 0.0
        term = entries.get(label + "+term", plain)
        times[label] = lc.StepTime(
            cpu=expected_seconds(term.median_cpu(), plain.median_cpu(), p),
            wall=expected_seconds(term.median_wall(), plain.median_wall(), p),
        )
    return times


def step_record(folder: Path, cfg: Config, reference: Config, problem: Problem, repeats: int) -> lc.StepTime | None:
    """The finished DEQ run's training step (expected over its Jacobian term's probability, trained weights) and a
    fresh Transformer-XL twin's (``reference``), timed interleaved in this process: read from RUN/step_time.json, or
    measured from the run's checkpoint and written there. None when neither exists (a restored run whose record was
    never made: retrain it)."""
    path = folder / STEP_RECORD
    if path.is_file():
        return lc.StepTime(**json.loads(path.read_text())["step"])
    if latest_complete_checkpoint(folder) is None:
        return None
    _, _, model, _ = load_model(folder, Path(cfg.data.data_dir))
    models = {"run": model, "reference": fresh_model(reference, problem)}
    times = step_times(models, {"run": cfg, "reference": reference}, problem, repeats)
    run, ref = times["run"], times["reference"]
    step = lc.StepTime(cpu=run.cpu, wall=run.wall, reference_cpu=ref.cpu, reference_wall=ref.wall)
    record = {"step": dataclasses.asdict(step), "reference": f"{TXL} (fresh weights)", "repeats": repeats}
    write_json(path, record)
    return step


def logged_iterations(folder: Path) -> tuple[int, int, int]:
    """The solver iterations of the DEQ run in ``folder``: forward and backward NFE of its last training record (a
    mean over the steps since the previous one) and the forward NFE of its final test evaluation, rounded."""
    records = read_metrics(folder / "metrics.jsonl")
    train = [r for r in records if r.get("split") == "train" and "nfe_forward" in r]
    if not train:
        raise RuntimeError(f"no training NFE in {folder / 'metrics.jsonl'}.")
    last = train[-1]
    forward, backward = last["nfe_forward"], last.get("nfe_backward", last["nfe_forward"])
    return max(1, round(forward)), max(1, round(backward)), max(1, round(test_record(folder)["nfe_forward"]))


def held_config(cfg: Config, iterations: tuple[int, int, int]) -> Config:
    """``cfg`` with its DEQ held to ``iterations`` (training forward, backward, inference): those limits, no jitter,
    tolerances of 1e-12 that no solve reaches, so every step makes exactly that many iterations."""
    forward, backward, inference = iterations
    return replace_config(cfg, {"deq.max_iter": forward, "deq.max_iter_jitter": 0, "deq.tol": 1e-12,
                                "deq.backward_max_iter": backward, "deq.backward_tol": 1e-12,
                                "deq.eval_max_iter": inference, "deq.eval_tol": 1e-12})  # fmt: skip


def body_parameters(cfg: Config, vocab_size: int) -> int:
    """Non-embedding parameters of a model of ``cfg``: the trainable scalars of its body (``count_parameters``, as
    the runs table counts them), built on the meta device (no memory, no weights)."""
    with torch.device("meta"):
        return count_parameters(build_model(cfg, vocab_size).body)


def matched_ffn(cfg: Config, target: int, vocab_size: int) -> int:
    """The FFN width (``model.d_ff``, columns) at which a model of ``cfg`` has ``target`` non-embedding parameters, as
    closely as an integer width allows.

    The count grows by the same number of parameters with every FFN column (a row of the first linear map, a column of
    the second, their bias and weight-norm entries), so it is read at widths 1 and 2 and the nearest width taken:
    the result is within half a column's parameters of ``target``.

    Raises:
        ValueError: ``target`` is below the count at width 1, or the count is not linear in the width.
    """
    at_one = body_parameters(replace_config(cfg, {"model.d_ff": 1}), vocab_size)
    per_column = body_parameters(replace_config(cfg, {"model.d_ff": 2}), vocab_size) - at_one
    if per_column <= 0 or target < at_one:
        raise ValueError(f"{cfg.model.name}: cannot reach {target:,} non-embedding parameters by its FFN width "
                         f"({at_one:,} at width 1, {per_column:+,} per column).")  # fmt: skip
    d_ff = 1 + round((target - at_one) / per_column)
    reached = body_parameters(replace_config(cfg, {"model.d_ff": d_ff}), vocab_size)
    if 2 * abs(reached - target) > per_column:
        raise ValueError(f"{cfg.model.name}: FFN width {d_ff} gives {reached:,} non-embedding parameters, not within "
                         f"half a column ({per_column:,}) of {target:,}: the count is not linear in d_ff.")  # fmt: skip
    return d_ff


def runtime_configs(
    pair: RuntimePair, seed: int, data_dir: Path, quick: bool, vocab_size: int
) -> tuple[Config, Config]:
    """The DEQ and the deep network of ``pair`` as Table 4 compares them: the deep network is the run config of
    ``pair.twin`` with ``pair.layers`` layers (its widths unchanged); the DEQ is the run config of ``pair.deq``, its
    FFN widened to the deep network's non-embedding parameters when ``pair.widen`` (:func:`matched_ffn`). The DEQ's
    solver settings are its run's (:func:`runtime` holds them to the logged iterations)."""
    twin = replace_config(run_config(pair.twin, seed, data_dir, quick), {"model.n_layers": pair.layers})
    deq = run_config(pair.deq, seed, data_dir, quick)
    if pair.widen:
        d_ff = matched_ffn(deq, body_parameters(twin, vocab_size), vocab_size)
        deq = replace_config(deq, {"model.d_ff": d_ff})
    return deq, twin


def runtime(deq_cfg: Config, twin_cfg: Config, folder: Path, problem: Problem, repeats: int) -> lc.Runtime:
    """One Table 4 pair (``deq_cfg``, ``twin_cfg``: :func:`runtime_configs`): fresh models of both (a step's cost
    depends on its iterations, not on the weights), the DEQ's solver held to the iterations its run in ``folder``
    logged (:func:`logged_iterations`), their training steps and then their inference steps timed interleaved in
    this process (``repeats`` rounds each, on one training segment after the memory of another)."""
    held = held_config(deq_cfg, logged_iterations(folder))
    models = {"deq": (held, fresh_model(held, problem)), "twin": (twin_cfg, fresh_model(twin_cfg, problem))}
    batch = deq_cfg.optim.batch_size
    first, second = problem.train_batch(0, batch), problem.train_batch(1, batch)
    steps, nfe = {}, []
    for what, timer in (("train", time_training_steps), ("inference", time_inference_steps)):
        deq, twin = (TimedEntry(label, cfg, model) for label, (cfg, model) in models.items())
        timer([deq, twin], first, second, repeats)
        steps[what] = lc.StepTime(deq.median_cpu(), deq.median_wall(), twin.median_cpu(), twin.median_wall())
        nfe += [n for n in deq.nfe[-1] if n is not None]
    layers = twin_cfg.model.n_layers
    params = {label: count_parameters(model.body) for label, (_, model) in models.items()}
    return lc.Runtime(_label(deq_cfg), f"{layers}-layer {_label(twin_cfg)}", steps["train"], steps["inference"],
                      tuple(nfe), layers, params["deq"], params["twin"])  # fmt: skip


def _label(cfg: Config) -> str:
    return cfg.model.name.replace("_", "-")


def _widths(cfg: Config) -> str:
    """The widths of ``cfg``'s layer, in words."""
    m = cfg.model
    if "trellisnet" in m.name:
        return f"width {m.d_model}, kernel {m.kernel}, dilation {m.dilation}"
    return f"width {m.d_model}, {m.n_heads} heads of {m.d_head}, FFN {m.d_ff:,}"


def sizing_note(rt: lc.Runtime, run_cfg: Config, deq_cfg: Config, twin_cfg: Config) -> str:
    """How the two networks of ``rt`` were sized: the deep network's layers and widths, the DEQ's widths (``deq_cfg``;
    its FFN widened from its run's, ``run_cfg``, when they differ), the non-embedding parameters of each and their
    ratio."""
    widened = ""
    if deq_cfg.model.d_ff != run_cfg.model.d_ff:
        widened = (f", its FFN widened from its run's {run_cfg.model.d_ff:,} columns until its non-embedding "
                   "parameters equal the deep network's")  # fmt: skip
    return (f"Sized as the paper's pair: the deep network is the {rt.twin} ({_widths(twin_cfg)}), "
            f"{rt.twin_params:,} non-embedding parameters; the DEQ is its run's config ({_widths(deq_cfg)}){widened}, "
            f"{rt.deq_params:,} non-embedding parameters, {rt.deq_params / rt.twin_params:.5f}x the deep "
            f"network's ({rt.deq_params - rt.twin_params:+,}).")  # fmt: skip


def runtime_note(rt: lc.Runtime, folder: Path, repeats: int, reference_layers: int) -> str:
    """How the runtime rows of ``rt`` were measured and, for reference only, the run's step record (RUN/step_time.json:
    its trained weights at its preset's limits, against a fresh Transformer-XL twin of ``reference_layers`` layers and
    the run's own non-embedding parameters) when there is one."""
    forward, backward, inference = rt.nfe
    note = (f"Measured by the claims command on fresh models of the two configs (a step's cost does not depend "
            f"on the weights), the DEQ's solver held to the iterations its run logged (last training record, final "
            f"test evaluation): {forward} forward / {backward} backward NFE per training step, {inference} per "
            f"inference step; one segment of the training batch after the memory of another, median of {repeats} "
            "interleaved rounds.")  # fmt: skip
    path = folder / STEP_RECORD
    if path.is_file():
        record = lc.StepTime(**json.loads(path.read_text())["step"])
        note += (f" For reference only, not the paper's comparison: the run's step record ({STEP_RECORD}: trained "
                 f"weights, the run's own FFN and its preset's limits) against the equal-parameter "
                 f"{reference_layers}-layer Transformer-XL twin: training {record.relative_cpu:.2f}x.")  # fmt: skip
    return note


def restore_runs(source: Path, out: Path) -> list[str]:
    """Copy every run folder of SOURCE (committed run logs: ``PRESET-seedS/`` with config.json and metrics.jsonl)
    to OUT/runs, with its kept files (:data:`KEPT_FILES`; no checkpoints). A run already in OUT/runs is left alone.
    Returns the names restored."""
    folders = sorted(p for p in Path(source).iterdir() if (p / "config.json").is_file()) if source.is_dir() else []
    if not folders:
        raise UsageError(f"--from {source}: no run folders (NAME/config.json) there; pass the run_logs folder of a "
                         "committed claims table, e.g. packages/deq-lm/results/claims/run_logs.")  # fmt: skip
    restored = []
    for folder in folders:
        target = out / "runs" / folder.name
        if target.exists():
            print(f"{folder.name}: already in {target.parent}, left alone")
            continue
        check_writable(target)  # creates it
        for name in KEPT_FILES:
            if (folder / name).is_file():
                write_bytes(target / name, (folder / name).read_bytes())
        restored.append(folder.name)
    return restored


def corpus_dir(args: argparse.Namespace) -> Path:
    """``--data-dir``, or the Python documentation corpus written to OUTPUT_DIR/corpus (full size; --quick: the
    first 400 / 60 / 60 lines of each split)."""
    if args.data_dir is not None:
        return Path(args.data_dir)
    folder = write_pythondocs_corpus(args.output_dir / "corpus")
    if not args.quick:
        return folder
    quick = args.output_dir / "corpus-quick"
    for split, n in (("train", 400), ("valid", 60), ("test", 60)):
        lines = (folder / f"{split}.txt").read_text(encoding="utf-8").splitlines()[:n]
        write_text(quick / f"{split}.txt", "\n".join(lines) + "\n")
    return quick


def available_presets(args: argparse.Namespace, data_dir: Path, folders: dict[str, list[Path]]) -> list[str]:
    """Train (or read) every run and return every preset; with ``--finished-only``, train nothing and return the
    presets whose runs have finished for every seed (the unregularized DEQ's must have: UsageError otherwise)."""
    if not args.finished_only:
        for preset in PRESETS:
            for seed, folder in zip(args.seeds, folders[preset]):
                ensure_run(run_config(preset, seed, data_dir, args.quick), folder, f"{preset}-seed{seed}")
        for preset, seed, cfg in copy400.runs(args.quick):
            ensure_run(cfg, run_dir(args.output_dir, preset, seed), f"{preset}-seed{seed}")
        return list(PRESETS)

    def done(preset: str) -> bool:
        pairs = zip(args.seeds, folders[preset])
        return all(finished(f, run_config(preset, s, data_dir, args.quick)) for s, f in pairs)

    if not done(DEQ):
        raise UsageError(
            f"--finished-only: the run {DEQ} has not finished in {folders[DEQ][0].parent}; every claim compares "
            "with it. Train it first (python -m lab.lm commands prints how)."
        )
    return [p for p in PRESETS if done(p)]


def spread_runs(out: Path, data_dir: Path, quick: bool) -> list[tuple[Config, Path, str]]:
    """(config, folder, name) of the Transformer-XL twin's runs over ``lc.SPREAD_SEEDS``, which measure one seed's
    spread of the test perplexity."""
    return [(run_config(TXL, s, data_dir, quick), run_dir(out, TXL, s), f"{TXL}-seed{s}") for s in lc.SPREAD_SEEDS]


def extra_spread_seeds(seeds: Sequence[int]) -> list[int]:
    """The seeds of ``lc.SPREAD_SEEDS`` that ``seeds`` (the claims' own runs) do not train already."""
    return [s for s in lc.SPREAD_SEEDS if s not in seeds]


def seed_spread(args: argparse.Namespace, data_dir: Path) -> list[float] | None:
    """The test perplexities of the spread runs (:func:`spread_runs`), trained or resumed where missing; with
    ``--finished-only`` nothing is trained and the result is None unless every spread run has finished."""
    runs = spread_runs(Path(args.output_dir), data_dir, args.quick)
    if args.finished_only and not all(finished(folder, cfg) for cfg, folder, _ in runs):
        return None
    for cfg, folder, name in runs:
        ensure_run(cfg, folder, name)
    return [float(test_record(folder)["ppl"]) for _, folder, _ in runs]


def with_note(row: ClaimResult, note: str) -> ClaimResult:
    """``row`` with ``note`` added after its own note."""
    return dataclasses.replace(row, note=f"{row.note} {note}".strip())


def not_measured(claims: Sequence[Claim], missing: Sequence[str], command: str) -> list[ClaimResult]:
    """Rows for claims whose runs have not finished (``--finished-only``), naming the missing runs."""
    names = ", ".join(p.removeprefix(f"{PREFIX}-") for p in missing)
    note = f"not finished: {names} (rerun without --finished-only)"
    return [ClaimResult(c, "-", None, command, note) for c in claims]


def claims(args: argparse.Namespace, data_dir: Path) -> list[ClaimResult]:
    """Train (or read) every run, measure, write DIR/claims.md, claims.json and ppl_vs_nfe.png. With
    ``--finished-only``, measure only the finished runs: claims needing a missing run are NOT MEASURED."""
    out = Path(args.output_dir)
    folders = {p: [run_dir(out, p, s) for s in args.seeds] for p in PRESETS}
    available = available_presets(args, data_dir, folders)
    configs = {p: [run_config(p, s, data_dir, args.quick) for s in args.seeds] for p in PRESETS}
    problem = build_problem(configs[DEQ][0])
    measured = {p: measure(p, configs[p], folders[p], problem) for p in available}
    times = {}
    for preset in (p for p in (DEQ, *JR) if p in available):
        repeats = TIMING_REPEATS[args.quick]
        record = step_record(folders[preset][0], configs[preset][0], configs[TXL][0], problem, repeats)
        if record is not None:
            times[measured[preset].label] = record
    command = "python -m lab.lm " + " ".join(shlex.quote(a) for a in args.argv)
    tokens = configs[DEQ][0].optim.batch_size * configs[DEQ][0].data.tgt_len
    deq, settings = measured[DEQ], [measured[p] for p in JR if p in available]
    spread = seed_spread(args, data_dir)
    results: list[ClaimResult] = []
    runtimes: dict[str, lc.Runtime] = {}
    for twin, claim_pair in ((TXL, (lc.PPL_VS_TXL, lc.MEMORY_VS_TXL)), (TIED, (lc.PPL_VS_TIED, lc.MEMORY_VS_TIED))):
        if twin in available:
            ppl_row, mem_row = lc.twin_results(deq, measured[twin], *claim_pair, command, tied=measured.get(TIED))
            if spread is not None:
                ppl_row = with_note(ppl_row, lc.spread_note(spread, deq, measured[twin]))
            results += [ppl_row, mem_row]
        else:
            results += not_measured(claim_pair, [twin], command)
    reference = configs[TXL][0]  # the spread's runs: the claims-budget twin, not the plateau one
    spread_of = (f"the claims-budget Transformer-XL twin's ({reference.model.d_model} wide, "
                 f"{reference.optim.steps:,} steps)")  # fmt: skip
    for twin, claim in ((PLATEAU_TXL, lc.PPL_VS_TXL_PLATEAU), (PLATEAU_TIED, lc.PPL_VS_TIED_PLATEAU)):
        missing = [p for p in (PLATEAU_DEQ, twin) if p not in available]
        if missing:
            results += not_measured((claim,), missing, command)
            continue
        deq_p, twin_p = measured[PLATEAU_DEQ], measured[twin]
        row = lc.plateau_ppl_row(deq_p, twin_p, claim, command, measured.get(PLATEAU_TIED))
        if spread is not None and row.holds is not None:  # a row without a verdict has nothing for seeds to decide
            row = with_note(row, lc.spread_note(spread, deq_p, twin_p, of=spread_of))
        results.append(row)
    if len(settings) == len(JR):
        results += lc.jr_results(deq, settings, times, command, early_stop=read_sweep(folders[DEQ][0]))
    else:
        results += not_measured((lc.JR_NFE, lc.JR_SPEED), [p for p in JR if p not in available], command)
    results += trellis_rows(measured, command, read_sweep(folders[TRELLIS_DEQ][0]))
    for pair in RUNTIME_PAIRS:  # the deep network is a fresh model of a config: only the DEQ's run is needed
        if pair.deq not in available:
            results += not_measured(pair.claims, [pair.deq], command)
            continue
        repeats, folder = TIMING_REPEATS[args.quick], folders[pair.deq][0]
        deq_cfg, twin_cfg = runtime_configs(pair, args.seeds[0], data_dir, args.quick, problem.vocab_size)
        rt = runtime(deq_cfg, twin_cfg, folder, problem, repeats)
        runtimes[rt.deq] = rt
        note = (f"{sizing_note(rt, configs[pair.deq][0], deq_cfg, twin_cfg)} "
                f"{runtime_note(rt, folder, repeats, configs[TXL][0].model.n_layers)}")  # fmt: skip
        results += lc.runtime_rows(rt, pair.claims, command, note)
    copy = copy400_measured(out, args.quick)
    results += copy400.rows(copy, command)
    if settings:
        lc.plot_ppl_vs_nfe(deq, settings, out / "ppl_vs_nfe.png")
    if copy:
        copy400.plot_losses(copy, out / "copy400_loss.png")
    table = runs_table(measured, folders, tokens) + "\n" + copy400_table(copy)
    earlier = read_earlier(EARLIER_TABLE, earlier_keys(), lc.EARLIER_REASONS)
    write_claims(out / "claims.md", results, title="deq-lm claims (DEQ paper Tables 1-4, JR paper Table 1)",
                 preamble=preamble(args, data_dir, table), earlier=earlier)  # fmt: skip
    dump = {"measured": {k: dataclasses.asdict(v) for k, v in measured.items()},
            "step_times": {k: dataclasses.asdict(v) for k, v in times.items()},
            "runtimes": {k: dataclasses.asdict(v) for k, v in runtimes.items()},
            "seed_spread": {"preset": TXL, "seeds": list(lc.SPREAD_SEEDS), "test_ppl": spread},
            "copy400": copy400.as_dict(copy),
            "verdicts": {r.claim.key: r.verdict for r in results}}  # fmt: skip
    write_json(out / "claims.json", dump)
    return results


def copy400_measured(out: Path, quick: bool) -> dict[str, copy400.Copy400]:
    """The copy-memory models (T = 400) whose runs have finished for every seed, read from their logs."""
    measured = {}
    for model in copy400.RUN_MODELS:
        cfgs = [copy400.run_config(model, s, quick) for s in copy400.seeds(model)]
        folders = [run_dir(out, copy400.preset(model), s) for s in copy400.seeds(model)]
        if all(finished(f, c) for f, c in zip(folders, cfgs)):
            measured[model] = copy400.measure(model, cfgs[0], folders)
    return measured


def copy400_table(copy: dict[str, copy400.Copy400]) -> str:
    """The copy-memory runs' table for the preamble (the models whose runs have finished)."""
    if not copy:
        return "Copy memory at T = 400: no model's runs have finished yet.\n"
    finished_models = ", ".join(copy)
    return (f"Copy memory at T = 400 (`{copy400.PREFIX}-*`, seeds {', '.join(map(str, copy400.SEEDS))}, the ablation "
            f"{copy400.ABLATION} seed {', '.join(map(str, copy400.ABLATION_SEEDS))}; finished: "
            f"{finished_models}; figure `copy400_loss.png`; gradient reach: the earliest input position that the "
            f"loss on the recall sends a nonzero gradient to in a fresh model's training step, 0 reaching the symbols "
            f"to copy):\n\n{copy400.runs_table(copy)}")  # fmt: skip


def trellis_rows(
    measured: dict[str, lc.Measured], command: str, sweep: dict[int, float] | None = None
) -> list[ClaimResult]:
    """The two rows of DEQ paper Table 2 (DEQ-TrellisNet vs the unrolled TrellisNet: perplexity at a plateau, saved
    activations), NOT MEASURED while either run is missing; ``sweep``: the DEQ's test perplexity by inference limit
    (its run's sweep.json), added to the perplexity row's note."""
    claims = (lc.PPL_VS_UNROLLED_TRELLIS, lc.MEMORY_VS_UNROLLED_TRELLIS)
    missing = [p for p in (TRELLIS_DEQ, TRELLIS_TWIN) if p not in measured]
    if missing:
        return not_measured(claims, missing, command)
    deq, twin = measured[TRELLIS_DEQ], measured[TRELLIS_TWIN]
    ppl_row = lc.plateau_ppl_row(deq, twin, claims[0], command)
    if sweep:
        ppl_row = with_note(ppl_row, lc.sweep_note(sweep, twin))
    return [ppl_row, lc.memory_row(deq, twin, claims[1], command, limit=lc.TRELLIS_MEMORY_FRACTION)]


def preamble(args: argparse.Namespace, data_dir: Path, table: str) -> str:
    """What was run: the runs' commands, seeds, corpus, the runs table, and the scale caveat of --quick."""
    lines = [
        f"Corpus: `{data_dir}`. Seeds: {', '.join(map(str, args.seeds))}. Runs (`python -m lab.lm commands` "
        "prints these, with `--resume` for a run interrupted in OUTPUT_DIR; each can run alone, in parallel):",
        "",
    ]
    lines += [f"- `{train_command(args.output_dir, p, s, data_dir, args.quick)}`" for p in PRESETS for s in args.seeds]
    extra = extra_spread_seeds(args.seeds)
    lines += ["", f"One seed's spread: the {TXL.removeprefix(f'{PREFIX}-')} twin also with seeds "
              f"{', '.join(map(str, extra))} (its runs are the cheapest; `claims.json`, seed_spread):", ""]  # fmt: skip
    lines += [f"- `{train_command(args.output_dir, TXL, s, data_dir, args.quick)}`" for s in extra]
    lines += ["", "Copy memory at T = 400 (no corpus):", ""]
    lines += [f"- `{config_command(p, cfg, run_dir(args.output_dir, p, s))}`" for p, s, cfg in copy400.runs(args.quick)]
    lines += [
        "",
        table,
        "Figure: `ppl_vs_nfe.png` (test perplexity vs inference NFE, JR sweep). Numbers: `claims.json`.",
    ]
    if args.quick:
        lines += ["", "**--quick**: tiny models, a few dozen steps: a smoke test of the pipeline, not a result."]
    return "\n".join(lines)


def plan(args: argparse.Namespace, data_dir: Path) -> str:
    """Planning numbers: each run's training step timed on a fresh model (DEQs forced to their iteration limits by
    tol 1e-12: an upper bound), interleaved, and the training minutes it implies for the preset's steps (evaluations
    not included). Returns a Markdown table."""
    configs = {p: run_config(p, args.seeds[0], data_dir, args.quick) for p in PRESETS}
    configs = {p: replace_config(c, {"deq.tol": 1e-12, "deq.backward_tol": 1e-12}) if c.is_deq else c
               for p, c in configs.items()}  # fmt: skip
    problem = build_problem(configs[DEQ])
    models = {}
    for preset, cfg in configs.items():
        torch.manual_seed(cfg.run.seed)
        models[preset] = build_model(cfg, problem.vocab_size)
    times = step_times(models, configs, problem, TIMING_REPEATS[args.quick] + 2)
    rows = []
    for preset, cfg in configs.items():
        t = times[preset]
        steps = cfg.optim.steps
        tokens = steps * cfg.optim.batch_size * cfg.data.tgt_len
        rows.append([preset, f"{count_parameters(models[preset].body):,}", tokens, f"{t.cpu:.3f}", f"{t.wall:.3f}",
                     f"{t.cpu * steps / 60:.1f}"])  # fmt: skip
    header = ["preset", "non-embedding params", "training tokens", "CPU s / step (at the limits)", "wall s / step",
              "training CPU min (no evaluations)"]  # fmt: skip
    return markdown_table(header, rows)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lab.lm", description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["claims", "commands", "plan", "restore"], help="claims: train, measure, "
                        "write the table; commands: print one training command per run; plan: time one training "
                        "step of each run on a fresh model (DEQs at their limits), print the implied minutes; "
                        "restore: copy committed run logs (--from) into OUTPUT_DIR/runs")  # fmt: skip
    parser.add_argument("--output-dir", type=Path, required=True, help="runs, claims.md and the figure go here")
    parser.add_argument("--data-dir", type=Path, default=None, help="corpus folder (train/valid/test.txt); default: "
                        "the Python documentation corpus written to OUTPUT_DIR/corpus")  # fmt: skip
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds of every run (default: 0)")
    parser.add_argument("--quick", action="store_true", help="tiny models, few steps: a smoke test")
    parser.add_argument("--from", dest="source", type=Path, default=None, help="restore: the committed run logs "
                        "folder, e.g. packages/deq-lm/results/claims/run_logs")  # fmt: skip
    parser.add_argument("--finished-only", action="store_true", help="claims: train nothing; measure the finished "
                        "runs, and mark claims whose runs have not finished NOT MEASURED")  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv
    torch.set_num_threads(1)
    try:
        if args.what == "restore":
            if args.source is None:
                raise UsageError("restore needs --from RUN_LOGS_DIR (e.g. packages/deq-lm/results/claims/run_logs).")
            for name in restore_runs(args.source, args.output_dir):
                print(f"restored {name} in {args.output_dir / 'runs'}")
            return 0
        data_dir = corpus_dir(args)
        if args.what == "plan":
            print(plan(args, data_dir))
            return 0
        if args.what == "commands":
            runs = [(p, s) for p in PRESETS for s in args.seeds] + [(TXL, s) for s in extra_spread_seeds(args.seeds)]
            for preset, seed in runs:  # an interrupted run continues from its checkpoint
                resume = latest_complete_checkpoint(run_dir(args.output_dir, preset, seed)) is not None
                print(train_command(args.output_dir, preset, seed, data_dir, args.quick, resume=resume))
            for preset, seed, cfg in copy400.runs(args.quick):
                folder = run_dir(args.output_dir, preset, seed)
                print(config_command(preset, cfg, folder, resume=latest_complete_checkpoint(folder) is not None))
            return 0
        results = claims(args, data_dir)
    except (UsageError, ValueError) as err:
        return usage_error(parser.prog, err)
    for r in results:
        print(f"{r.claim.key}: {r.verdict} ({r.ours})")
    print(f"wrote {args.output_dir / 'claims.md'}")
    return 0
