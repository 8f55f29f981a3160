import pytest
import torch

from deq_lm.data import copy_memory_batch, copy_memory_metrics, copy_memory_split


@pytest.mark.parametrize("T", [1, 5, 100])
def test_copy_memory_layout(T):
    x, y = copy_memory_batch(64, T, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (64, T + 20)
    assert x.dtype == torch.long
    symbols = x[:, :10]
    assert ((symbols >= 1) & (symbols <= 8)).all()
    assert (x[:, 10 : 10 + T - 1] == 0).all()  # T - 1 blanks
    assert (x[:, -11:] == 9).all()  # eleven markers, as TCN's generator writes them
    assert (y[:, : T + 10] == 0).all()
    assert torch.equal(y[:, -10:], symbols)
    assert len(torch.unique(symbols)) == 8  # all of 1..8 are drawn


def test_copy_memory_matches_tcn_generator():
    """TCN's generator concatenates the symbols, T - 1 zeros and eleven nines (input), and ten zeros, T zeros and
    the symbols (target)."""
    T = 400
    x, y = copy_memory_batch(3, T, torch.Generator().manual_seed(2))
    symbols = x[:, :10]
    expected_x = torch.cat([symbols, torch.zeros(3, T - 1, dtype=torch.long), torch.full((3, 11), 9)], dim=1)
    expected_y = torch.cat([torch.zeros(3, 10 + T, dtype=torch.long), symbols], dim=1)
    assert torch.equal(x, expected_x) and torch.equal(y, expected_y)


def test_copy_memory_seeded_and_errors():
    a = copy_memory_split(8, 10, seed=3)
    b = copy_memory_split(8, 10, seed=3)
    c = copy_memory_split(8, 10, seed=4)
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], c[0])
    with pytest.raises(ValueError, match="horizon T"):
        copy_memory_batch(2, 0)
    with pytest.raises(ValueError, match="batch_size"):
        copy_memory_batch(0, 5)


def test_copy_memory_metrics():
    x, y = copy_memory_batch(4, 7, torch.Generator().manual_seed(1))
    perfect = torch.nn.functional.one_hot(y, 10).float() * 50
    loss, acc = copy_memory_metrics(perfect, y)
    assert acc == 1.0 and loss < 1e-6
    wrong = perfect.clone()
    wrong[:, -10:] = torch.nn.functional.one_hot((y[:, -10:] % 8) + 1, 10).float() * 50  # every recall wrong
    loss, acc = copy_memory_metrics(wrong, y)
    assert acc == 0.0 and loss > 1.0
    uniform = torch.zeros(4, 27, 10)
    loss, _ = copy_memory_metrics(uniform, y)
    assert abs(float(loss) - torch.log(torch.tensor(10.0))) < 1e-5
