"""Position schemes. Each acts through up to three hooks, all no-ops by default:

* ``embed(x, pos)``            adds to token embeddings (sinusoidal, learned);
* ``rotate(q, k, q_pos, k_pos)`` rotates queries and keys (RoPE);
* ``score_bias(q_pos, k_pos)``   returns an additive (B|1, H, Lq, Lk) score bias (ALiBi, T5).

Positions are explicit integer tensors of shape (B|1, L), so cached decoding (offset positions)
and left-padded prompts need no special cases.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from ..errors import ConfigError
from ..registry import NoOptions, Registry

POSITIONS = Registry("positions", "position scheme")


@dataclass(frozen=True)
class PositionContext:
    """What a scheme may need to know about the stack it serves."""

    d_model: int
    n_heads: int
    head_dim: int
    max_seq_len: int
    causal: bool  # decoder self-attention (T5 buckets differ)

    @classmethod
    def of(cls, m, causal: bool) -> "PositionContext":
        """The context of a stack of ``m`` (a ModelConfig, or one layer's): the one way to build it, for
        building and for checking alike. ``causal``: the decoder's stack (an encoder_decoder's encoder
        is not)."""
        return cls(m.d_model, m.n_heads, m.dim_per_head, m.max_seq_len, causal)


def stack_causality(m) -> Tuple[bool, ...]:
    """The ``causal`` flag of each stack a model of kind ``m.kind`` has."""
    return {"encoder": (False,), "decoder": (True,), "encoder_decoder": (False, True)}[m.kind]


class PositionScheme(nn.Module):
    """A position signal with three hooks, each a no-op here: ``embed`` (adds to the embeddings),
    ``rotate`` / ``rotator`` (q and k) and ``score_bias`` (the attention scores). What a scheme does
    is read once, when its class is defined, from the hooks it overrides (``__init_subclass__``), and
    every caller asks these flags: ``adds_to_embeddings``, ``rotates``, ``biases_scores`` and
    ``acts_in_attention`` (rotates or biases: usable in cross-attention, and per layer)."""

    adds_to_embeddings = rotates = biases_scores = acts_in_attention = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.adds_to_embeddings = cls.embed is not PositionScheme.embed
        cls.rotates = cls.rotate is not PositionScheme.rotate or cls.rotator is not PositionScheme.rotator
        cls.biases_scores = cls.score_bias is not PositionScheme.score_bias
        acts = cls.rotates or cls.biases_scores
        declared = cls.__dict__.get("acts_in_attention")
        if declared is not None and bool(declared) != acts:  # (a plugin may still say it; it must be true)
            raise TypeError(f"{cls.__name__} declares acts_in_attention = {declared}, but it "
                            f"{'overrides' if acts else 'overrides none of'} rotate/rotator/score_bias")
        cls.acts_in_attention = acts

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        return x

    def rotate(self, q: Tensor, k: Optional[Tensor], q_pos: Tensor, k_pos: Tensor
               ) -> Tuple[Tensor, Optional[Tensor]]:
        """k may be None (cached cross-attention keys were rotated already)."""
        return q, k

    def score_bias(self, q_pos: Tensor, k_pos: Tensor, cross: bool = False) -> Optional[Tensor]:
        return None

    def rotator(self, q_pos: Tensor, k_pos: Tensor):
        """``rotate`` bound to these positions, for every layer of one forward pass; None when the
        scheme does not rotate. Schemes override it to compute per-position tables only once."""
        if type(self).rotate is PositionScheme.rotate:  # (a scheme that overrides rotator alone has its own)
            return None
        return lambda q, k: self.rotate(q, k, q_pos, k_pos)

    @classmethod
    def check(cls, options, ctx: PositionContext, key: str) -> None:
        """Raise ConfigError if the options do not fit the model; called before building."""

    @classmethod
    def max_length(cls, options, ctx: PositionContext) -> Optional[int]:
        """The longest sequence the scheme can represent (None: any length)."""
        return None

    @classmethod
    def embed_rms(cls, options, ctx: PositionContext, init_std) -> Optional[float]:
        """The root mean square, at initialisation, of what ``embed`` adds to a token embedding: set
        against the token embeddings' scale, it says whether the tokens are drowned out (describe shows
        the ratio, training warns). ``init_std(rows, cols)`` is the model's init's std for an embedding
        table. 0.0 when ``embed`` adds nothing; None: undeclared (then it is measured)."""
        return None if cls.adds_to_embeddings else 0.0


@POSITIONS.register("none", NoOptions, "no position information (permutation-equivariant encoder)")
class NoPosition(PositionScheme):
    def __init__(self, options, ctx: PositionContext):
        super().__init__()


@dataclass(frozen=True)
class SinusoidalOptions:
    base: float = 10000.0


@POSITIONS.register("sinusoidal", SinusoidalOptions, "fixed sin/cos added to embeddings (Vaswani et al. 2017)")
class Sinusoidal(PositionScheme):
    def __init__(self, options: SinusoidalOptions, ctx: PositionContext):
        super().__init__()
        half = (ctx.d_model + 1) // 2
        inv = torch.exp(-math.log(options.base) * torch.arange(half, dtype=torch.float64) * 2 / ctx.d_model)
        self.register_buffer("inv_freq", inv.float(), persistent=False)
        self.d_model = ctx.d_model

    def table(self, pos: Tensor) -> Tensor:
        angles = pos.unsqueeze(-1).float() * self.inv_freq
        pe = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)  # sin, cos interleaved
        return pe[..., : self.d_model]

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        return x + self.table(pos).to(x.dtype)

    @classmethod
    def embed_rms(cls, options, ctx, init_std):
        # each (sin, cos) pair has squared norm 1, so every position's vector has mean square 1/2;
        # an odd width's last column (a sine alone) is left to the measurement
        return math.sqrt(0.5) if ctx.d_model % 2 == 0 else None


@dataclass(frozen=True)
class LearnedOptions:
    size: Optional[int] = None  # table length; defaults to model.max_seq_len


@POSITIONS.register("learned", LearnedOptions, "trained absolute position table added to embeddings")
class Learned(PositionScheme):
    def __init__(self, options: LearnedOptions, ctx: PositionContext):
        super().__init__()
        self.table = nn.Embedding(options.size or ctx.max_seq_len, ctx.d_model)

    @classmethod
    def check(cls, options, ctx, key):
        if options.size is not None and options.size < ctx.max_seq_len:
            raise ConfigError(f"{key}.size", f"learned position table ({options.size}) is shorter than "
                              f"model.max_seq_len ({ctx.max_seq_len})")

    @classmethod
    def max_length(cls, options, ctx):
        return options.size or ctx.max_seq_len

    @classmethod
    def embed_rms(cls, options, ctx, init_std):
        return init_std(options.size or ctx.max_seq_len, ctx.d_model)  # an embedding table: the init's

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        n = self.table.num_embeddings
        # the range check reads the data, which would split a compiled graph; compiled, the
        # embedding lookup itself still refuses an index past the table
        if not torch.compiler.is_compiling() and pos.numel() and int(pos.max()) >= n:
            raise ValueError(f"position {int(pos.max())} is past the learned position table ({n} positions)")
        return x + self.table(pos)


def _pair_halves(x: Tensor, rot: int, interleaved: bool) -> Tuple[Tensor, Tensor]:
    """The two members of each rotated pair: (x0, x2, ..), (x1, x3, ..) or the first and second half."""
    if interleaved:
        return x[..., 0:rot:2], x[..., 1:rot:2]
    return x[..., : rot // 2], x[..., rot // 2: rot]


def _rotate_pairs(x: Tensor, cos: Tensor, sin: Tensor, rot: int, interleaved: bool) -> Tensor:
    """Each pair (a, b) of the first ``rot`` dims becomes (a cos - b sin, b cos + a sin); the rest is
    copied. One output buffer and four kernels, where the textbook x*cos + rotate_half(x)*sin
    allocates five temporaries. Under torch.compile, which cannot trace ``out=`` into views (a graph
    break), the same arithmetic is written out of place for the compiler to fuse."""
    a, b = _pair_halves(x, rot, interleaved)
    if torch.compiler.is_compiling():
        turned_a, turned_b = a * cos - b * sin, b * cos + a * sin
        head = (torch.stack((turned_a, turned_b), dim=-1).flatten(-2) if interleaved
                else torch.cat((turned_a, turned_b), dim=-1))
        return torch.cat((head, x[..., rot:]), dim=-1) if rot < x.shape[-1] else head
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    out_a, out_b = _pair_halves(out, rot, interleaved)
    torch.mul(a, cos, out=out_a).addcmul_(b, sin, value=-1)
    torch.mul(b, cos, out=out_b).addcmul_(a, sin)
    if rot < x.shape[-1]:
        out[..., rot:] = x[..., rot:]
    return out


class _RotaryFunction(torch.autograd.Function):
    """RoPE as one autograd node: a rotation is orthogonal, so its backward is the rotation by the
    opposite angle (sin -> -sin), and nothing of x needs saving. Measured 2-4% of a whole
    Llama-style training step on CPU against the autograd-traced textbook form."""

    @staticmethod
    def forward(ctx, x: Tensor, cos: Tensor, sin: Tensor, rot: int, interleaved: bool) -> Tensor:
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)  # no-ops unless autocast changed x's dtype
        ctx.save_for_backward(cos, sin)
        ctx.rot, ctx.interleaved = rot, interleaved
        return _rotate_pairs(x, cos, sin, rot, interleaved)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        cos, sin = ctx.saved_tensors
        return _rotate_pairs(grad, cos, -sin, ctx.rot, ctx.interleaved), None, None, None, None


@dataclass(frozen=True)
class RopeOptions:
    base: float = 10000.0
    fraction: float = 1.0  # share of each head's dims that rotate (GPT-NeoX style partial rotary)
    interleaved: bool = False  # rotate (x0,x1),(x2,x3)... pairs instead of the two halves

    def __post_init__(self):
        if not 0.0 < self.fraction <= 1.0:
            raise ValueError(f"fraction must be in (0, 1], got {self.fraction}")


@POSITIONS.register("rope", RopeOptions, "rotary embeddings on q and k (Su et al. 2021)")
class Rotary(PositionScheme):

    def __init__(self, options: RopeOptions, ctx: PositionContext):
        super().__init__()
        self.rot = self.rotated_dims(options, ctx)
        inv = 1.0 / options.base ** (torch.arange(0, self.rot, 2, dtype=torch.float64) / self.rot)
        self.register_buffer("inv_freq", inv.float(), persistent=False)
        self.interleaved = options.interleaved

    @staticmethod
    def rotated_dims(options: RopeOptions, ctx: PositionContext) -> int:
        return int(round(ctx.head_dim * options.fraction))

    @classmethod
    def check(cls, options, ctx, key):
        rot = cls.rotated_dims(options, ctx)
        if rot % 2 or rot == 0:
            raise ConfigError(key, f"RoPE needs an even, non-zero rotated dimension; head_dim {ctx.head_dim} "
                              f"x fraction {options.fraction} = {rot}")

    def _cos_sin(self, pos: Tensor) -> Tuple[Tensor, Tensor]:
        angles = pos.unsqueeze(-1).float() * self.inv_freq  # (B, L, rot/2): one angle per pair
        return angles.cos().unsqueeze(1), angles.sin().unsqueeze(1)  # (B, 1, L, rot/2)

    def _rotate_with(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        return _RotaryFunction.apply(x, cos, sin, self.rot, self.interleaved)

    def rotate(self, q, k, q_pos, k_pos):
        return self.rotator(q_pos, k_pos)(q, k)

    def rotator(self, q_pos, k_pos):
        q_tab = self._cos_sin(q_pos)
        k_tab = q_tab if k_pos is q_pos else self._cos_sin(k_pos)
        return lambda q, k: (self._rotate_with(q, *q_tab), None if k is None else self._rotate_with(k, *k_tab))


def alibi_slopes(n_heads: int, max_bias: float = 8.0) -> Tensor:
    """Geometric per-head slopes from Press et al. 2022; non-powers of two interleave the next power."""
    def powers(n):
        start = 2 ** (-max_bias / n)
        return [start ** (i + 1) for i in range(n)]

    closest = 2 ** math.floor(math.log2(n_heads))
    slopes = powers(closest)
    if closest < n_heads:
        slopes += powers(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(slopes)


@dataclass(frozen=True)
class AlibiOptions:
    max_bias: float = 8.0


@POSITIONS.register("alibi", AlibiOptions, "linear distance penalty on attention scores (Press et al. 2022)")
class Alibi(PositionScheme):

    def __init__(self, options: AlibiOptions, ctx: PositionContext):
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(ctx.n_heads, options.max_bias), persistent=False)

    def score_bias(self, q_pos, k_pos, cross=False):
        dist = (k_pos.unsqueeze(-2) - q_pos.unsqueeze(-1)).abs().unsqueeze(1)  # (B, 1, Lq, Lk)
        return -self.slopes.view(1, -1, 1, 1) * dist


@dataclass(frozen=True)
class T5BiasOptions:
    num_buckets: int = 32
    max_distance: int = 128


def t5_bucket(relative: Tensor, bidirectional: bool, num_buckets: int, max_distance: int) -> Tensor:
    """Bucket of each key-minus-query distance: exact for small distances, log-spaced up to max_distance."""
    buckets = torch.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative > 0).long() * num_buckets
        distance = relative.abs()
    else:
        distance = (-relative).clamp(min=0)
    exact = num_buckets // 2
    far = exact + (
        torch.log(distance.float().clamp(min=1) / exact) / math.log(max_distance / exact) * (num_buckets - exact)
    ).long()
    far = far.clamp(max=num_buckets - 1)
    return buckets + torch.where(distance < exact, distance, far)


@POSITIONS.register("t5_bias", T5BiasOptions, "learned bucketed relative bias, shared by all layers (Raffel et al. 2020)")
class T5Bias(PositionScheme):

    def __init__(self, options: T5BiasOptions, ctx: PositionContext):
        super().__init__()
        self.options = options
        self.causal = ctx.causal
        self.bias = nn.Embedding(options.num_buckets, ctx.n_heads)

    def score_bias(self, q_pos, k_pos, cross=False):
        relative = k_pos.unsqueeze(-2) - q_pos.unsqueeze(-1)  # (B, Lq, Lk)
        buckets = t5_bucket(relative, cross or not self.causal, self.options.num_buckets, self.options.max_distance)
        return self.bias(buckets).permute(0, 3, 1, 2)  # (B, H, Lq, Lk)
