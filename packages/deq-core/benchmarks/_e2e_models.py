"""The three models of the end-to-end benchmark (``end_to_end.py``), self-contained so that deq-core imports no task
package. Each mirrors a task package's DEQ and exposes the same four parts, used alike by both DEQ libraries:

- ``batch(n, gen)``: a random batch (inputs, targets) on the CPU;
- ``prepare(inputs) -> (ctx, z0)``: what is computed once per step (the input injection), and the start state;
- ``f(z, ctx) -> z``: the equilibrium map; z is a tuple of tensors (one per resolution for the conv model, one
  tensor otherwise), batch first;
- ``loss(z, targets)``: the scalar training loss from the state f(z*).

Models (the benchmark's sizes in ``SIZES``):

- ``conv``: MDEQ-like (deq-vision): stem conv + GroupNorm gives the injection u0 (B, C0, H, W), a strided conv + GN
  of it u1 (B, C1, H/2, W/2), both times ``CONV_INJECTION`` = 3; the state is two resolutions, (B, C0, H, W) and
  (B, C1, H/2, W/2); per branch a residual block conv3x3 -> GN -> ReLU -> conv3x3 -> GN + u_i + z -> ReLU -> GN,
  then a fusion (the coarse branch upsampled by a 1x1 conv + GN + nearest
  interpolation, the fine one downsampled by a strided 3x3 conv + GN, added, ReLU, GN); classifier on the pooled
  branches; cross-entropy over 10 classes. No weight normalization: f is the same code for both libraries (the
  weight-norm cost is ``weight_norm.py``'s subject).
- ``transformer``: DEQ-Transformer layer (deq-lm): token embedding x (times ``TRANSFORMER_INJECTION`` = 2);
  f(z) = LN2(z + FFN(LN1(z + Attn(z) + x))), causal multi-head self-attention (``problems.TransformerCell``);
  next-token cross-entropy from a linear head.
- ``gru``: the GRU-cell DEQ of deq-toy: x = Linear(one-hot tokens), z0 = GRU0(one-hot) without gradient,
  f(z) = tanh(GRU(z + x)); a linear readout of the flattened state; binary cross-entropy.
- ``quickstart``: the model of ``examples/quickstart.py``: u = Linear(x) (16 -> 64), f(z) = tanh(W z + u) (64 x 64,
  without the example's weight normalization, so that f is the same code in both libraries), a linear head (64 -> 4),
  mean squared error on random targets; batch 256, a small state (D = 64) where the solvers' own buffers weigh most.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from problems import TransformerCell

State = tuple[Tensor, ...]
# Injection scales: with them the untrained cells are contractive enough that Anderson (m=6) reaches a relative
# residual of 1e-3 in about 25 calls of f (measured, seed 0), as a trained DEQ does within its limits; at scale 1 the
# conv cell stalls near 1e-1 and the transformer reaches 7e-3 after 30 calls. The float64 gradient check of the
# benchmark needs solves that converge to 1e-10.
CONV_INJECTION = 3.0
TRANSFORMER_INJECTION = 2.0


@dataclass(frozen=True)
class Sizes:
    batch: int
    length: int  # conv: image side; transformer / gru: sequence length


SIZES = {
    "conv": (Sizes(16, 16), Sizes(4, 8)),  # (full, --quick)
    "transformer": (Sizes(8, 32), Sizes(2, 8)),
    "gru": (Sizes(32, 12), Sizes(4, 6)),
    "quickstart": (Sizes(256, 1), Sizes(32, 1)),
}


class ResidualBlock(nn.Module):
    """conv3x3 -> GN -> ReLU -> conv3x3 -> GN + injection + z -> ReLU -> GN; (B, C, h, w) -> same."""

    def __init__(self, channels: int, groups: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.gn1, self.gn2, self.gn3 = (nn.GroupNorm(groups, channels) for _ in range(3))

    def forward(self, z: Tensor, injection: Tensor) -> Tensor:
        y = self.gn2(self.conv2(torch.relu(self.gn1(self.conv1(z)))))
        return self.gn3(torch.relu(y + injection + z))


class ConvModel(nn.Module):
    """MDEQ-like classifier on (B, 3, H, W) images, two resolutions (see the module docstring)."""

    def __init__(self, channels: tuple[int, int] = (16, 32), groups: int = 4, classes: int = 10) -> None:
        super().__init__()
        c0, c1 = channels
        self.channels, self.classes = channels, classes
        self.stem = nn.Sequential(nn.Conv2d(3, c0, 3, padding=1, bias=False), nn.GroupNorm(groups, c0))
        self.stem1 = nn.Sequential(nn.Conv2d(c0, c1, 3, stride=2, padding=1, bias=False), nn.GroupNorm(groups, c1))
        self.block0, self.block1 = ResidualBlock(c0, groups), ResidualBlock(c1, groups)
        self.down = nn.Sequential(nn.Conv2d(c0, c1, 3, stride=2, padding=1, bias=False), nn.GroupNorm(groups, c1))
        self.up = nn.Sequential(nn.Conv2d(c1, c0, 1, bias=False), nn.GroupNorm(groups, c0))
        self.post0, self.post1 = nn.GroupNorm(groups, c0), nn.GroupNorm(groups, c1)
        self.head = nn.Linear(c0 + c1, classes)

    def batch(self, sizes: Sizes, gen: torch.Generator) -> tuple[Tensor, Tensor]:
        images = torch.randn(sizes.batch, 3, sizes.length, sizes.length, generator=gen)
        return images, torch.randint(0, self.classes, (sizes.batch,), generator=gen)

    def prepare(self, images: Tensor) -> tuple[State, State]:
        u0 = self.stem(images)
        u1 = self.stem1(u0)
        return (CONV_INJECTION * u0, CONV_INJECTION * u1), (torch.zeros_like(u0), torch.zeros_like(u1))

    def f(self, z: State, u: State) -> State:
        y0, y1 = self.block0(z[0], u[0]), self.block1(z[1], u[1])
        up = F.interpolate(self.up(y1), size=y0.shape[-2:], mode="nearest")
        return self.post0(torch.relu(y0 + up)), self.post1(torch.relu(y1 + self.down(y0)))

    def loss(self, z: State, labels: Tensor) -> Tensor:
        pooled = torch.cat([z[0].mean(dim=(2, 3)), z[1].mean(dim=(2, 3))], dim=1)
        return F.cross_entropy(self.head(pooled), labels)


class TransformerModel(nn.Module):
    """Causal DEQ-Transformer language model on (B, T) tokens (see the module docstring)."""

    def __init__(self, vocab: int = 64, d_model: int = 64) -> None:
        super().__init__()
        self.vocab = vocab
        self.embed = nn.Embedding(vocab, d_model)
        self.cell = TransformerCell(d_model=d_model, n_heads=4, d_ff=4 * d_model, causal=True)
        self.head = nn.Linear(d_model, vocab)

    def batch(self, sizes: Sizes, gen: torch.Generator) -> tuple[Tensor, Tensor]:
        tokens = torch.randint(0, self.vocab, (sizes.batch, sizes.length + 1), generator=gen)
        return tokens[:, :-1], tokens[:, 1:]

    def prepare(self, tokens: Tensor) -> tuple[Tensor, State]:
        x = TRANSFORMER_INJECTION * self.embed(tokens)
        return x, (torch.zeros_like(x),)

    def f(self, z: State, x: Tensor) -> State:
        return (self.cell(z[0], x),)

    def loss(self, z: State, targets: Tensor) -> Tensor:
        return F.cross_entropy(self.head(z[0]).flatten(0, 1), targets.flatten())


class GRUModel(nn.Module):
    """deq-toy's GRU-cell DEQ on (B, T, V) one-hot tokens, one logit per sequence (see the module docstring)."""

    def __init__(self, vocab: int = 16, hidden: int = 48, length: int = 12) -> None:
        super().__init__()
        self.vocab, self.length = vocab, length
        self.inject = nn.Linear(vocab, hidden)
        self.start = nn.GRU(vocab, hidden, batch_first=True)
        self.gru = nn.GRU(hidden, hidden, batch_first=True)
        self.readout = nn.Linear(length * hidden, 1)

    def batch(self, sizes: Sizes, gen: torch.Generator) -> tuple[Tensor, Tensor]:
        if sizes.length != self.length:
            raise ValueError(f"GRUModel was built for length {self.length}, not {sizes.length}.")
        tokens = torch.randint(0, self.vocab, (sizes.batch, sizes.length), generator=gen)
        labels = torch.randint(0, 2, (sizes.batch,), generator=gen).float()
        return F.one_hot(tokens, self.vocab).float(), labels

    def prepare(self, one_hot: Tensor) -> tuple[Tensor, State]:
        x = self.inject(one_hot)
        with torch.no_grad():
            z0 = self.start(one_hot)[0]
        return x, (z0,)

    def f(self, z: State, x: Tensor) -> State:
        return (torch.tanh(self.gru(z[0] + x)[0]),)

    def loss(self, z: State, labels: Tensor) -> Tensor:
        return F.binary_cross_entropy_with_logits(self.readout(z[0].flatten(1)).squeeze(1), labels)


class QuickstartModel(nn.Module):
    """The quickstart example's regressor on (B, 16) inputs, (B, 4) targets (see the module docstring)."""

    def __init__(self, n_in: int = 16, width: int = 64, n_out: int = 4) -> None:
        super().__init__()
        self.n_in, self.n_out = n_in, n_out
        self.inject = nn.Linear(n_in, width)
        self.cell = nn.Linear(width, width, bias=False)
        self.head = nn.Linear(width, n_out)

    def batch(self, sizes: Sizes, gen: torch.Generator) -> tuple[Tensor, Tensor]:
        return torch.randn(sizes.batch, self.n_in, generator=gen), torch.randn(sizes.batch, self.n_out, generator=gen)

    def prepare(self, x: Tensor) -> tuple[Tensor, State]:
        u = self.inject(x)
        return u, (torch.zeros_like(u),)

    def f(self, z: State, u: Tensor) -> State:
        return (torch.tanh(self.cell(z[0]) + u),)

    def loss(self, z: State, targets: Tensor) -> Tensor:
        return F.mse_loss(self.head(z[0]), targets)


def build(name: str, quick: bool, seed: int) -> tuple[nn.Module, Sizes]:
    """The model ``name`` (parameters from ``seed``) and its batch sizes."""
    sizes = SIZES[name][1 if quick else 0]
    torch.manual_seed(seed)
    if name == "conv":
        return ConvModel(), sizes
    if name == "transformer":
        return TransformerModel(), sizes
    if name == "quickstart":
        return QuickstartModel(), sizes
    return GRUModel(length=sizes.length), sizes
