"""A launcher that asks for FSDP or DeepSpeed (``accelerate launch --use_fsdp`` / ``--use_deepspeed``, which reach the
processes as ACCELERATE_USE_FSDP / ACCELERATE_USE_DEEPSPEED) is refused in one line naming the variable and the way
to launch instead; DDP and a plain environment pass."""

from __future__ import annotations

import pytest

from deq_core.train.errors import UsageError
from deq_core.train.launch import SHARDED_MODES, refuse_sharded_modes


@pytest.mark.parametrize("variable", sorted(SHARDED_MODES))
@pytest.mark.parametrize("value", ["true", "TRUE", "True"])
def test_a_sharded_mode_is_refused_in_one_line(variable: str, value: str) -> None:
    with pytest.raises(UsageError) as caught:
        refuse_sharded_modes({variable: value, "ACCELERATE_MIXED_PRECISION": "no"})
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and message.startswith(f"{variable}=true: this trainer does not run under")
    assert "launch with --multi_gpu" in message


@pytest.mark.parametrize(
    "environ", [{}, {"ACCELERATE_USE_FSDP": "false"}, {"ACCELERATE_USE_DEEPSPEED": "false", "WORLD_SIZE": "2"}]
)
def test_ddp_and_a_plain_environment_pass(environ: dict[str, str]) -> None:
    refuse_sharded_modes(environ)
