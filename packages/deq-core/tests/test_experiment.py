"""deq_core.train (schedules, overrides, metrics, checks): the Jacobian and pretraining schedules, the jittered
iteration limit, key=value overrides, the metrics log."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from conftest import ExampleConfig as Config
from deq_core.train.metrics import MetricsLog, read_metrics, select
from deq_core.train.overrides import apply_overrides
from deq_core.train.plots import draw_solver_curves, plot_training
from deq_core.train.progress import progress_enabled
from deq_core.train.reports import MarkdownReport, markdown_table
from deq_core.train.schedules import JacobianSchedule, PretrainSchedule, jittered_max_iter


def test_overrides_parse_each_type() -> None:
    cfg = apply_overrides(
        Config(), ["lr=3e-4", "steps=20", "solver=broyden", "sizes=4,5,6", "name=none", "jitter=true"]
    )
    assert cfg == Config(lr=3e-4, steps=20, solver="broyden", sizes=(4, 5, 6), name=None, jitter=True)
    assert apply_overrides(Config(), ["name=wt103", "steps=1e3"]) == Config(name="wt103", steps=1000)
    assert apply_overrides(Config(), []) == Config()


@pytest.mark.parametrize(
    "item, message",
    [
        ("foo=1", "unknown config key 'foo'; valid keys: lr, steps, solver, sizes, name, jitter"),
        ("steps=2.5", "'steps=2.5': Value '2.5' of type 'str' could not be converted to Integer"),
        ("steps=ten", "'steps=ten': Value 'ten' of type 'str' could not be converted to Integer"),
        ("lr=fast", "'lr=fast': Value 'fast' of type 'str' could not be converted to Float"),
        ("solver=newton", "'solver=newton': Invalid value 'newton', expected one of ['anderson', 'broyden']"),
        ("jitter=maybe", "'jitter=maybe': Value 'maybe' is not a valid bool"),
        ("sizes=1,x", "'sizes=1,x': an element of ['1', 'x'] could not be converted to Integer"),
        ("lr=none", "'lr=none': Value 'none' of type 'str' could not be converted to Float"),
        ("lr", "not of the form key=value"),
    ],
)
def test_bad_overrides_say_what_is_wrong(item: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        apply_overrides(Config(), [item])
    assert message in str(err.value)


@dataclasses.dataclass(frozen=True)
class _Optim:
    lr: float = 1e-3
    betas: tuple[float, ...] = (0.9, 0.999)


@dataclasses.dataclass(frozen=True)
class _Nested:
    name: str = "run"
    optim: _Optim = dataclasses.field(default_factory=_Optim)


def test_dotted_overrides_reach_nested_configs_and_later_items_win() -> None:
    cfg = apply_overrides(_Nested(), ["optim.lr=3e-4", "optim.betas=0.5,0.9", "name=a", "name=b"])
    assert cfg == _Nested(name="b", optim=_Optim(lr=3e-4, betas=(0.5, 0.9)))
    # values are text, not YAML: "no" stays a string, "${x}" is no interpolation
    assert apply_overrides(_Nested(), ["name=no"]).name == "no"
    assert apply_overrides(_Nested(), ["name=${x}"]).name == "${x}"
    with pytest.raises(ValueError, match="unknown config section 'optim' key 'momentum'; valid keys: lr, betas"):
        apply_overrides(_Nested(), ["optim.momentum=0.9"])
    with pytest.raises(ValueError, match="'optim.lr=x': Value 'x' of type 'str' could not be converted to Float"):
        apply_overrides(_Nested(), ["optim.lr=x"])


def test_jacobian_schedule_weight_grows_every_period() -> None:
    sched = JacobianSchedule(weight=2.0, growth=0.5, every=100)
    assert [sched.weight_at(s) for s in (0, 99, 100, 250)] == [2.0, 2.0, 2.5, 3.0]
    assert JacobianSchedule(weight=1.0).weight_at(10**6) == 1.0
    # counted from the end of pretraining (step 30), as the reference code counts it
    after = JacobianSchedule(weight=2.0, growth=0.5, every=100, start=30)
    assert [after.weight_at(s) for s in (0, 129, 130, 280)] == [2.0, 2.0, 2.5, 3.0]


def test_jacobian_schedule_probability_and_determinism() -> None:
    sched = JacobianSchedule(weight=1.0, probability=0.35, seed=3)
    draws = [sched.active(s) for s in range(4000)]
    assert abs(sum(draws) / len(draws) - 0.35) < 0.03
    assert draws == [JacobianSchedule(weight=1.0, probability=0.35, seed=3).active(s) for s in range(4000)]
    assert draws != [JacobianSchedule(weight=1.0, probability=0.35, seed=4).active(s) for s in range(4000)]
    assert not any(JacobianSchedule(weight=0.0, probability=1.0).active(s) for s in range(10))
    assert all(JacobianSchedule(weight=1.0, probability=1.0).active(s) for s in range(10))


def test_jacobian_schedule_stops_at_the_stop_step() -> None:
    sched = JacobianSchedule(weight=1.0, growth=1.0, every=10, stop=25)
    assert [sched.weight_at(s) for s in (0, 10, 24, 25, 26, 1000)] == [1.0, 2.0, 3.0, 0.0, 0.0, 0.0]
    assert [sched.active(s) for s in (0, 24, 25, 10**6)] == [True, True, False, False]
    # The draws before the stop are those of the same schedule without a stop.
    random_stop = JacobianSchedule(weight=1.0, probability=0.5, seed=7, stop=300)
    no_stop = JacobianSchedule(weight=1.0, probability=0.5, seed=7)
    assert [random_stop.active(s) for s in range(300)] == [no_stop.active(s) for s in range(300)]
    assert not any(random_stop.active(s) for s in range(300, 600)) and any(no_stop.active(s) for s in range(300, 600))
    assert not any(JacobianSchedule(weight=1.0, stop=0).active(s) for s in range(5))
    assert JacobianSchedule(weight=1.0).stop is None


@pytest.mark.parametrize(
    "kwargs", [{"weight": -1.0}, {"probability": 1.5}, {"every": -1}, {"growth": -0.1}, {"stop": -1}]
)
def test_jacobian_schedule_rejects_bad_values(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        JacobianSchedule(**kwargs)


def test_jittered_max_iter_is_deterministic_and_in_range() -> None:
    limits = [jittered_max_iter(20, 5, seed=3, step=s) for s in range(2000)]
    assert set(limits) == set(range(15, 21))  # every value of [max_iter - jitter, max_iter], nothing outside
    assert limits == [jittered_max_iter(20, 5, seed=3, step=s) for s in range(2000)]  # the same after a resume
    assert limits != [jittered_max_iter(20, 5, seed=4, step=s) for s in range(2000)]
    assert limits[1:] != limits[:-1]  # varies from step to step
    assert all(jittered_max_iter(20, 0, seed=3, step=s) == 20 for s in range(50))
    assert {jittered_max_iter(2, 1, seed=0, step=s) for s in range(200)} == {1, 2}


@pytest.mark.parametrize("max_iter, jitter", [(10, -1), (10, 10), (3, 7)])
def test_jittered_max_iter_rejects_a_limit_below_one(max_iter: int, jitter: int) -> None:
    with pytest.raises(ValueError, match="max_iter_jitter must be in"):
        jittered_max_iter(max_iter, jitter, seed=0, step=0)


def test_pretrain_schedule() -> None:
    sched = PretrainSchedule(steps=3, depth=4)
    assert [sched.unroll_at(s) for s in range(5)] == [4, 4, 4, None, None]
    with pytest.raises(ValueError):
        PretrainSchedule(steps=1, depth=0)


def test_metrics_log_round_trip_and_truncate(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path / "run" / "metrics.jsonl")
    assert log.read() == []
    for step in range(5):
        log.write({"step": step, "split": "train", "loss": torch.tensor(1.0 / (step + 1)), "nfe": step})
    log.write({"step": 4, "split": "valid", "loss": float("nan")})
    records = log.read()
    assert len(records) == 6 and records[2]["loss"] == pytest.approx(1 / 3) and records[5]["loss"] == "nan"
    assert select(records, "train", "loss")[0] == [0, 1, 2, 3, 4]
    assert log.line_count() == 6 and log.resume_at(3) is False
    assert [r["step"] for r in log.read()] == [0, 1, 2]
    (tmp_path / "bad.jsonl").write_text(json.dumps({"step": 0}) + "\n{not json\n")
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        read_metrics(tmp_path / "bad.jsonl")


def test_markdown_table_and_report(tmp_path, capsys) -> None:
    assert markdown_table(["a", "b"], [[1, 2.5], ["x", None]]) == "| a | b |\n|---|---|\n| 1 | 2.5 |\n| x | None |\n"
    with pytest.raises(ValueError, match="a table row has 1 cells for 2 columns"):
        markdown_table(["a", "b"], [[1]])
    report = MarkdownReport()
    report.add("# title")
    report.table(["k"], [[3]])
    assert "# title" in capsys.readouterr().out  # printed as it goes
    report.write(tmp_path / "r.md", first_line="Command: `x`")
    assert (tmp_path / "r.md").read_text() == "Command: `x`\n\n# title\n| k |\n|---|\n| 3 |\n\n"
    report.write(None)  # no file asked for: nothing written


class _Axes:
    """Records what a plotting function draws (stands in for a matplotlib Axes)."""

    def __init__(self) -> None:
        self.lines: list[tuple[list[int], list[float], str | None]] = []
        self.settings: dict[str, object] = {}

    def plot(self, x: list[int], y: list[float], label: str | None = None) -> None:
        self.lines.append((list(x), list(y), label))

    def set(self, **settings: object) -> None:
        self.settings.update(settings)


def test_draw_solver_curves_plots_nfe_and_residual_of_the_split() -> None:
    records = [
        {"step": 1, "split": "train", "nfe_forward": 10, "nfe_backward": 12, "residual": 1e-3},
        {"step": 2, "split": "train", "nfe_forward": 8, "nfe_backward": 9, "residual": 5e-4},
        {"step": 2, "split": "valid", "nfe_forward": 30, "residual": 1e-4},
    ]
    nfe, residual = _Axes(), _Axes()
    draw_solver_curves(nfe, residual, records)
    assert nfe.lines == [([1, 2], [10, 8], "forward"), ([1, 2], [12, 9], "backward")]
    assert residual.lines == [([1, 2], [1e-3, 5e-4], None)] and residual.settings["yscale"] == "log"
    empty = _Axes()
    draw_solver_curves(empty, _Axes(), [{"step": 1, "split": "train", "loss": 1.0}])  # explicit model: no curves
    assert empty.lines == []


def test_plot_training_leaves_the_callers_matplotlib_backend_alone(tmp_path: Path) -> None:
    """A notebook's backend (inline, a GUI) stays what it was after a run writes its training plot."""
    import matplotlib

    log = tmp_path / "metrics.jsonl"
    records = [{"step": s, "split": "train", "loss": 1.0 / s, "acc": 0.1 * s, "nfe_forward": 5} for s in (1, 2, 3)]
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    before = matplotlib.get_backend()
    matplotlib.use("svg")
    try:
        out = plot_training(log, tmp_path / "training.png", metric="acc")
        assert matplotlib.get_backend() == "svg"
    finally:
        matplotlib.use(before)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


class _Stream:
    def __init__(self, tty: bool) -> None:
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize("value", ["1", "true", "True", "yes"])
def test_progress_bar_honours_tqdm_disable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    assert progress_enabled(True, _Stream(tty=True))
    monkeypatch.setenv("TQDM_DISABLE", value)
    assert not progress_enabled(True, _Stream(tty=True))
    for off in ("", "0", "false", "no"):
        monkeypatch.setenv("TQDM_DISABLE", off)
        assert progress_enabled(True, _Stream(tty=True)), off


def test_progress_bar_only_on_a_terminal_of_the_main_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    assert not progress_enabled(True, _Stream(tty=False))  # a log file or a pipe: no carriage-return redraws
    assert not progress_enabled(False, _Stream(tty=True))
    assert not progress_enabled(True, object())  # type: ignore[arg-type]  # a stream without isatty
