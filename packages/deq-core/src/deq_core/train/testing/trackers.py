"""TensorBoard files of a run read back, for the tests of ``run.log_with=tensorboard`` of a task: the scalars
TensorBoard shows, the same series from metrics.jsonl, and the hyperparameters of the run (tensorboard's own event
reader, which must be installed; no training code calls this).

A series is ``{tag: [(step, value), ...]}`` with tags ``{split}/{key}`` (``train/loss``, ``valid/ppl``), as
:func:`deq_core.train.trackers.tracker_values` names them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from deq_core.train.metrics import read_metrics

__all__ = ["assert_tensorboard_matches_metrics", "metrics_series", "tensorboard_hparams", "tensorboard_series"]

Series = dict[str, list[tuple[int, float]]]


def tensorboard_series(folder: str | Path) -> Series:
    """The scalars of the TensorBoard event files in ``folder`` as TensorBoard shows them (the events a resumed
    writer purged are left out), each tag's points in step order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: sorted((e.step, e.value) for e in events.Scalars(tag)) for tag in events.Tags()["scalars"]}


def metrics_series(run: str | Path) -> Series:
    """The numbers of ``run``/metrics.jsonl (bools as 0 / 1), in the file's order."""
    series: Series = {}
    for record in read_metrics(Path(run) / "metrics.jsonl"):
        for key, value in record.items():
            if key not in ("step", "split") and isinstance(value, (int, float)):
                series.setdefault(f"{record['split']}/{key}", []).append((record["step"], float(value)))
    return series


def assert_tensorboard_matches_metrics(run: str | Path, project: str, required: set[str]) -> None:
    """Assert that TensorBoard's scalars under ``run``/trackers/``project`` are the numbers of metrics.jsonl: the same
    tags (``required`` among them), each step once, the values equal in float32 (TensorBoard stores float32)."""
    found, expected = tensorboard_series(Path(run) / "trackers" / project), metrics_series(run)
    assert set(found) == set(expected), (sorted(found), sorted(expected))
    assert required <= set(found), sorted(required - set(found))
    for tag, points in expected.items():
        assert [step for step, _ in found[tag]] == [step for step, _ in points], tag
        stored = np.array([value for _, value in found[tag]], dtype=np.float32)
        np.testing.assert_array_equal(stored, np.array([v for _, v in points], dtype=np.float32), err_msg=tag)


def tensorboard_hparams(folder: str | Path) -> dict[str, object]:
    """The hyperparameters TensorBoard shows for the run whose files are in ``folder`` (the hparams plugin's session
    start, written in a subfolder)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    for sub in sorted(Path(folder).iterdir()):
        if not sub.is_dir():
            continue
        events = EventAccumulator(str(sub))
        events.Reload()
        content = events.PluginTagToContent("hparams").get("_hparams_/session_start_info")
        if content is not None:
            info = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
            return {key: getattr(value, value.WhichOneof("kind")) for key, value in info.hparams.items()}
    raise AssertionError(f"no hparams in the TensorBoard folder {folder}")
