"""The ``deq`` section of task configs (``deq_core.train.deq_config``) and nested configs in ``run_config``: checks
that name the dotted key, the layer and schedules it builds, dotted overrides and changes, and run folders written
with the flat layout of earlier versions read into the nested one."""

from __future__ import annotations

import dataclasses
import json

import pytest

import deq_core
from deq_core.train.deq_config import DEQConfig, deq_section, deq_settings, parse_options
from deq_core.train.overrides import apply_overrides
from deq_core.train.run_config import (
    ResumeConfigError,
    check_resume_config,
    config_changes,
    config_from_dict,
    flat_dict,
    load_config,
    replace_config,
    save_config,
)
from deq_core.train.schedules import JacobianSchedule, PretrainSchedule


@dataclasses.dataclass(frozen=True)
class _TaskConfig:
    lr: float = 1e-3
    eval_every: int = 10
    deq: DEQConfig = deq_section(solver="broyden", max_iter=18, backward_solver="anderson", jac_prob=0.5)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"solver": "newton"}, "deq.solver: "),
        ({"max_iter": 0}, "deq.max_iter must be a number >= 1, got 0"),
        ({"max_iter": True}, "deq.max_iter must be a number >= 1, got True"),
        ({"max_iter": 2_000_000_000}, "deq.max_iter must be at most 1000 (a solve that never meets its tol"),
        ({"backward_max_iter": 1001}, "deq.backward_max_iter must be at most 1000"),
        ({"eval_max_iter": 1001}, "deq.eval_max_iter must be at most 1000"),
        ({"max_iter_jitter": 30}, "deq.max_iter_jitter must be < max_iter (30), got 30"),
        ({"tol": 0.0}, "deq.tol must be > 0, got 0.0"),
        ({"eval_tol": -1.0}, "deq.eval_tol must be > 0 or None, got -1.0"),
        ({"eval_max_iter": 0}, "deq.eval_max_iter must be >= 1 or None, got 0"),
        ({"jac_prob": 1.5}, "deq.jac_prob must be in [0, 1], got 1.5"),
        ({"backward": "adjoint"}, "deq.backward must be one of ['implicit', 'phantom', 'jfb'], got 'adjoint'"),
        ({"phantom_damping": 0.0}, "deq.phantom_damping must be in (0, 1], got 0.0"),
        ({"backward_options": ("m=6",)}, "deq.backward_options: unknown option(s) ['m'] for solver 'broyden'"),
        ({"solver_options": ("m6",)}, "deq.solver_options: 'm6' is not of the form key=value"),
        ({"solver_options": ("m=0",)}, "deq.solver_options: "),  # the solver's own range check
        ({"check_every": 0}, "deq.check_every must be an integer >= 1 or none"),
        ({"check_every": 2.5}, "deq.check_every must be an integer >= 1 or none"),
        ({"backward_check_every": True}, "deq.backward_check_every must be an integer >= 1 or none"),
        ({"backward_check_every": 2**31}, "deq.backward_check_every must be an integer from 1 to 2**31 - 1"),
    ],
)
def test_deq_section_names_the_bad_setting(changes, message):
    DEQConfig()  # the defaults pass
    with pytest.raises(ValueError) as info:
        DEQConfig(**changes)
    assert message in str(info.value)


def test_deq_section_builds_the_layer_and_the_schedules():
    cfg = DEQConfig(solver="anderson", solver_options=("m=6", "beta=0.8"), max_iter=12, tol=1e-3,
                    backward_options=("memory=4",), backward_max_iter=9, eval_max_iter=20)  # fmt: skip
    layer = cfg.layer()
    assert layer.solver == deq_core.Anderson(m=6, beta=0.8) and (layer.max_iter, layer.tol) == (12, 1e-3)
    assert layer.backward == deq_core.Implicit(deq_core.Broyden(memory=4), max_iter=9, tol=1e-6)
    assert layer.eval_max_iter == 20
    assert DEQConfig(backward="phantom", phantom_steps=3).layer().backward == deq_core.Phantom(steps=3, damping=0.5)
    assert isinstance(DEQConfig(backward="jfb").layer().backward, deq_core.JFB)
    assert DEQConfig(pretrain_steps=5, pretrain_depth=3).pretrain_schedule() == PretrainSchedule(5, 3)
    jr = DEQConfig(jac_weight=2.0, jac_prob=0.4, jac_growth=0.1, jac_every=10, jac_stop=50, pretrain_steps=7)
    assert jr.jacobian_schedule(seed=3) == JacobianSchedule(2.0, 0.4, 0.1, 10, seed=3, stop=50, start=7)
    assert DEQConfig().jacobian_schedule(seed=0).stop is None  # jac_stop 0: never switched off
    assert parse_options(["memory=10", "beta=0.5", "line_search=true", "name=x"]) == {
        "memory": 10, "beta": 0.5, "line_search": True, "name": "x",
    }  # fmt: skip


def test_check_every_reaches_the_forward_and_backward_solves():
    layer = DEQConfig(check_every=4, backward_check_every=2).layer()
    assert layer.check_every == 4 and layer.backward.check_every == 2
    defaults = DEQConfig().layer()  # None: the device's default (1 on the CPU, 4 elsewhere), chosen per solve
    assert defaults.check_every is None and defaults.backward.check_every is None
    cfg = apply_overrides(_TaskConfig(), ["deq.check_every=8", "deq.backward_check_every=none"])
    assert cfg.deq.check_every == 8 and cfg.deq.backward_check_every is None


def test_dotted_overrides_and_changes_reach_the_section():
    cfg = apply_overrides(_TaskConfig(), ["deq.max_iter=12", "deq.solver_options=memory=6", "deq.eval_tol=none"])
    assert cfg.deq.max_iter == 12 and cfg.deq.solver_options == ("memory=6",) and cfg.deq.eval_tol is None
    assert cfg.deq.solver == "broyden" and cfg.deq.jac_prob == 0.5  # the task's own defaults stay
    assert apply_overrides(_TaskConfig(), ["max_iter=12"]).deq.max_iter == 12  # only the deq section has it
    with pytest.raises(ValueError, match="unknown config key 'maxiter' \\(did you mean deq.max_iter, "):
        apply_overrides(_TaskConfig(), ["maxiter=12"])
    with pytest.raises(ValueError, match="deq.max_iter must be a number >= 1, got 0"):
        apply_overrides(_TaskConfig(), ["deq.max_iter=0"])
    changed = replace_config(_TaskConfig(), {"deq.max_iter": 7, "lr": 2e-3})
    assert changed.deq.max_iter == 7 and changed.lr == 2e-3 and changed.deq.solver == "broyden"
    with pytest.raises(ValueError, match="unknown config key 'maxiter'"):
        replace_config(_TaskConfig(), {"deq.maxiter": 7})
    with pytest.raises(ValueError, match="'lr' is not a config section"):
        replace_config(_TaskConfig(), {"lr.x": 7})
    assert deq_settings(max_iter=7, jac_weight=0.5) == {"deq.max_iter": 7, "deq.jac_weight": 0.5}
    assert replace_config(_TaskConfig(), deq_settings(max_iter=7)).deq.max_iter == 7
    with pytest.raises(ValueError, match="unknown DEQ setting 'maxiter'; valid names: solver, "):
        deq_settings(maxiter=7)
    assert config_changes(_TaskConfig(), changed) == {"deq.max_iter": (18, 7), "lr": (1e-3, 2e-3)}
    assert config_changes(_TaskConfig(), changed, resumable={"lr"}) == {"deq.max_iter": (18, 7)}
    assert flat_dict(changed)["deq.max_iter"] == 7 and flat_dict(changed)["eval_every"] == 10


def test_config_json_round_trip_and_the_flat_layout_of_earlier_versions(tmp_path):
    cfg = replace_config(_TaskConfig(), {"deq.solver_options": ("memory=6",), "deq.max_iter": 9})
    save_config(cfg, tmp_path / "new", "task")
    assert json.loads((tmp_path / "new" / "config.json").read_text())["config"]["deq"]["max_iter"] == 9
    assert load_config(tmp_path / "new", _TaskConfig) == ("task", cfg)
    # an earlier version wrote every setting at the top level: read into the section, the rest from its defaults
    flat = {"lr": 1e-3, "eval_every": 10, "solver": "broyden", "solver_options": ["memory=6"], "max_iter": 9,
            "gone_setting": 1}  # fmt: skip
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "config.json").write_text(json.dumps({"name": "task", "config": flat}))
    assert load_config(tmp_path / "old", _TaskConfig) == ("task", cfg)
    assert config_from_dict(_TaskConfig, {"deq": {"tol": 0.01}}).deq == dataclasses.replace(_TaskConfig().deq, tol=0.01)
    assert check_resume_config(tmp_path / "old", replace_config(cfg, {"eval_every": 5}), {"eval_every"}) == {
        "eval_every": (10, 5)}  # fmt: skip
    with pytest.raises(ResumeConfigError, match=r"deq.max_iter: 9 -> 10"):
        check_resume_config(tmp_path / "old", replace_config(cfg, {"deq.max_iter": 10}))
