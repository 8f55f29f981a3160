"""Profile the training step of one arithmetic preset: ``python profile_step.py PRESET BATCH STEPS DATA_DIR [k=v ...]``.

Runs STEPS optimizer steps once to warm up, then again under cProfile; prints the mean time per step and the
functions with the largest own time. Used for the README's profile of the GRU-DEQ step.
"""

import cProfile
import pstats
import sys
import time
from pathlib import Path

import torch

from deq_toy.configs import load_config
from deq_toy.tasks import build_task


def main() -> None:
    preset, batch, steps, data_dir, *overrides = sys.argv[1:]
    torch.set_num_threads(1)
    task = build_task(load_config(preset, [f"batch_size={batch}", *overrides]), Path(data_dir))
    optimizer = torch.optim.Adam(task.model.parameters(), lr=1e-3)

    def run() -> None:
        for step in range(int(steps)):
            loss, _, _ = task.train_step(task.batch(step), step)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    run()
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    run()
    profiler.disable()
    print(f"{(time.perf_counter() - start) / int(steps):.3f} s per step")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
