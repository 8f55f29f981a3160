"""Several CPU processes under ``accelerate launch``: two processes on one machine join one run (Accelerator(cpu=True))
and write one metrics file and one set of TensorBoard files (``run.log_with=tensorboard``); the same two processes
as two machines (``--num_machines 2``, machine ranks 0 and 1 on 127.0.0.1) write the same checkpoint, byte for byte;
a launcher asking for FSDP or DeepSpeed is refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import learnable_images
from deq_core.train.testing.processes import free_port, launch_env
from deq_core.train.testing.trackers import assert_tensorboard_matches_metrics, tensorboard_hparams
from deq_vision import train
from deq_vision.data import write_cifar_folder

LAUNCH = [
    sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--mixed_precision",
    "no", "--dynamo_backend", "no", "--main_process_ip", "127.0.0.1",
]  # fmt: skip
CHECKPOINT = Path("checkpoints") / "step_0000004"
# What a checkpoint holds besides run_config.json (the copy of config.json, whose tracker id is drawn per run).
SAME_FILES = (
    "checkpoint.json", "model.safetensors", "optimizer.pt", "scheduler.pt", "rng_rank0.pt", "rng_rank1.pt",
)  # fmt: skip


def _training(cifar_dir: Path, out: Path, *extra: str) -> list[str]:
    train_args = ["--config", "tiny-mdeq", "--data-dir", str(cifar_dir), "--output-dir", str(out), "--threads", "1"]
    return [*extra, "-m", "deq_vision.train", *train_args]


@pytest.fixture(scope="module")
def one_machine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(run folder, data folder) of tiny-mdeq trained by two processes on one machine, with TensorBoard."""
    root = tmp_path_factory.mktemp("ddp")
    write_cifar_folder(root / "cifar", *learnable_images(96))
    out = root / "one"
    cmd = [*LAUNCH, *_training(root / "cifar", out, "--num_machines", "1", "--main_process_port", free_port())]
    done = subprocess.run(
        [*cmd, "run.log_with=tensorboard"],
        capture_output=True,
        text=True,
        timeout=600,
        env=launch_env(CUDA_VISIBLE_DEVICES=""),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 process(es)" in done.stdout
    return out, root / "cifar"


def test_two_cpu_processes_train_one_run(one_machine: tuple[Path, Path]) -> None:
    out, _ = one_machine
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["split"] == "train"] == [1, 2, 3, 4]
    assert (out / CHECKPOINT / "model.safetensors").is_file()
    # The main process alone logs to TensorBoard: each step once, the values of metrics.jsonl, the config.
    assert_tensorboard_matches_metrics(out, "tiny-mdeq", {"train/loss", "train/nfe_forward", "eval/acc"})
    hparams = tensorboard_hparams(out / "trackers" / "tiny-mdeq")
    assert hparams["num_processes"] == 2 and hparams["data.dataset"] == "cifar10"


def test_two_machines_write_the_checkpoint_of_one(one_machine: tuple[Path, Path], tmp_path: Path) -> None:
    """accelerate launch --num_machines 2 --machine_rank R, one process per machine, both on 127.0.0.1 (what two
    hosts run, with the first host's address): the run's checkpoint equals the one-machine run's byte for byte."""
    one, cifar = one_machine
    out, port = tmp_path / "two", free_port()
    procs, env = [], launch_env(CUDA_VISIBLE_DEVICES="")
    for rank in (1, 0):
        machine = ("--num_machines", "2", "--machine_rank", str(rank), "--main_process_port", port)
        cmd = [*LAUNCH, *_training(cifar, out, *machine)]
        with (tmp_path / f"machine{rank}.txt").open("w") as log:  # the child keeps its own handle
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path))
    try:
        codes = [proc.wait(timeout=600) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    logs = {rank: (tmp_path / f"machine{rank}.txt").read_text() for rank in (0, 1)}
    assert codes == [0, 0], logs[0][-2000:] + logs[1][-2000:]
    assert "2 process(es)" in logs[0]
    for name in SAME_FILES:
        assert (out / CHECKPOINT / name).read_bytes() == (one / CHECKPOINT / name).read_bytes(), name
    # train_state.json: the same but for the digest of each run's own metrics lines, which hold wall-clock timings
    two_machines, one_machine = (json.loads((run / CHECKPOINT / "train_state.json").read_text()) for run in (out, one))
    assert two_machines.pop("metrics_digest") and one_machine.pop("metrics_digest")
    assert two_machines == one_machine


@pytest.mark.parametrize("variable", ["ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED"])
def test_a_sharded_launch_is_refused_in_one_line(cifar_dir, tmp_path, monkeypatch, capsys, variable) -> None:
    """What accelerate launch --use_fsdp / --use_deepspeed sets: one line, exit status 2, no run folder."""
    monkeypatch.setenv(variable, "true")
    out = tmp_path / "run"
    assert train.main(["--config", "tiny-mdeq", "--data-dir", str(cifar_dir), "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{variable}=true: this trainer does not run under" in err[0], err
    assert not out.exists()
