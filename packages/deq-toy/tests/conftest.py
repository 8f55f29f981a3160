"""Shared fixtures: a single torch thread so that timings of the suite stay stable on a shared machine."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)
    yield
