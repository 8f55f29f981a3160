"""The evaluation sweep sets each row's limits on the DEQ layer as a deq_core.Plan: every row is the model rebuilt
with those evaluation limits in its config, and the layer's own limits do not change."""

import pytest
import torch

from deq_core.train.run_config import replace_config
from deq_lm.configs import get_config
from deq_lm.evaluate import sweep
from deq_lm.models import build_model
from deq_lm.problems import build_problem
from deq_lm.train import evaluate_split


@pytest.mark.filterwarnings("ignore:DEQ forward solve stopped unconverged")  # 1 and 3 iterations, on purpose
def test_a_sweep_row_is_the_model_rebuilt_with_those_eval_limits():
    cfg = replace_config(get_config("tiny-deq-transformer"), {"data.n_valid": 8})
    problem = build_problem(cfg)
    torch.manual_seed(0)
    model = build_model(cfg, problem.vocab_size).eval()
    rows = sweep(cfg, problem, model, "valid", [1, 3], [1e-1])
    base_tol = cfg.deq.eval_tol or cfg.deq.tol
    assert [(r["max_iter"], r["tol"]) for r in rows] == [(1, base_tol), (3, base_tol), (3, 0.1)]
    assert rows[0]["nfe_forward"] == 1.0  # the plan's limit reached the layer
    for row in rows:
        changes = {"deq.eval_max_iter": row["max_iter"], "deq.eval_tol": row["tol"]}
        rebuilt = build_model(replace_config(cfg, changes), problem.vocab_size)
        rebuilt.load_state_dict(model.state_dict())
        expected = evaluate_split(rebuilt.eval(), problem, "valid", torch.device("cpu"))
        assert {k: v for k, v in row.items() if k not in ("max_iter", "tol")} == expected
    deq = model.body.deq
    assert (deq.max_iter, deq.tol, deq.eval_max_iter, deq.eval_tol) == (
        cfg.deq.max_iter, cfg.deq.tol, cfg.deq.eval_max_iter, cfg.deq.eval_tol
    )  # fmt: skip
