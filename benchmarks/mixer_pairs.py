"""The layers ``mixers.py train`` times against each other: one entry per arch_zoo mixer, each a function
``(d_model, quick) -> (ours, theirs, call_theirs)`` building arch_zoo's layer and its peer at the same
shape, and the peer's name. Adding a mixer is adding one entry to ``PAIRS``.

Peers: Hugging Face's own module for the layer, run on its pure-torch path (no fla, mamba-ssm or
causal-conv1d installed), in float32. From ``mamba2_bamba`` on, the peer is loaded with arch_zoo's initial
weights (the mixer's ``to_hf_layer``, the interop mapping), so both compute the same function, which
``mixers.py`` checks before it times them. ``rwkv7`` and ``gated_deltaproduct`` have no transformers layer:
their peer is the same layer, same weights, at ``chunk_size`` 1, where the chunked scan becomes a Python
loop over positions, one step of the paper's recurrence each (the plain loop a chunked form is there to
beat). ``gated_deltanet`` and ``mamba2`` (the first pairs, 2026-12-03) keep random weights of their own."""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, NamedTuple, Tuple

import torch
from torch import nn

from arch_zoo.components.mixers import MIXERS
from arch_zoo.components.mixers.recurrent import renamed
from arch_zoo.config.loading import model_config


class Pair(NamedTuple):
    build: Callable[[int, bool], Tuple[nn.Module, nn.Module, Callable]]
    peer: str  # the peer's row name
    same_weights: bool  # ours loaded from the peer: the outputs must agree before timing


def mixer(d: int, options: dict, bias: bool = False) -> nn.Module:
    cfg = model_config({"d_model": d, "n_heads": 4, "n_layers": 1, "bias": bias, "position": "none",
                        "mixer": options})
    return MIXERS.build(cfg.mixer, cfg, None)


def loaded(module: nn.Module, state: Dict[str, torch.Tensor]) -> nn.Module:
    module.load_state_dict(state)
    return module


def from_ours(theirs: nn.Module, ours: nn.Module, to_hf: Callable[[nn.Module], Dict[str, torch.Tensor]]):
    """(ours, theirs on ours' weights): arch_zoo initialises every parameter, while a bare transformers
    module leaves some as torch.empty left them (its model's _init_weights fills them)."""
    return ours, loaded(theirs, to_hf(ours))


def gdn_pair(d: int, quick: bool):
    """Qwen3-Next's layout in small: value heads twice the key heads, 64-wide heads (16 when tiny)."""
    from transformers import Qwen3NextConfig
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet

    heads, dim, chunk = 2, min(64, d // 4), 16 if quick else 64
    ours = mixer(d, {"name": "gated_deltanet", "n_heads": heads, "n_v_heads": 2 * heads, "head_dim": dim,
                     "v_head_dim": dim, "conv_size": 4, "chunk_size": chunk})
    theirs = Qwen3NextGatedDeltaNet(Qwen3NextConfig(
        hidden_size=d, linear_num_key_heads=heads, linear_num_value_heads=2 * heads, linear_key_head_dim=dim,
        linear_value_head_dim=dim, linear_conv_kernel_dim=4, num_hidden_layers=1, layer_types=["linear_attention"]), 0)
    return ours, theirs, lambda x: theirs(x)


def mamba2_options(d: int, quick: bool) -> dict:
    """Mamba-2's defaults in small: expand 2, 64-wide heads (16 when tiny), state 64 (16), one group."""
    dim = min(64, d // 4)
    return {"name": "mamba2", "n_heads": 2 * d // dim, "head_dim": dim, "state_size": min(64, d // 4),
            "n_groups": 1, "conv_size": 4, "chunk_size": 16 if quick else 64}


def mamba2_pair(d: int, quick: bool):
    from transformers import Mamba2Config
    from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer

    o = mamba2_options(d, quick)
    ours = mixer(d, o)
    theirs = Mamba2Mixer(Mamba2Config(hidden_size=d, num_heads=o["n_heads"], head_dim=o["head_dim"], expand=2,
                                      state_size=o["state_size"], n_groups=1, conv_kernel=4, chunk_size=o["chunk_size"],
                                      use_bias=False, use_conv_bias=True, num_hidden_layers=1), 0)
    return ours, theirs, lambda x: theirs(x)


MAMBA2_HF_NAMES = {"out_proj": "out", "conv1d": "conv.conv"}  # interop/families/mamba2.py's mixer_weights


def bamba_pair(d: int, quick: bool):
    """Bamba's mamba2 layer (BambaMixer), Mamba-2's shape above; ours on its weights."""
    from transformers import BambaConfig
    from transformers.models.bamba.modeling_bamba import BambaMixer

    o = mamba2_options(d, quick)
    theirs = BambaMixer(BambaConfig(hidden_size=d, mamba_n_heads=o["n_heads"], mamba_d_head=o["head_dim"],
                                    mamba_expand=2, mamba_d_state=o["state_size"], mamba_n_groups=1, mamba_d_conv=4,
                                    mamba_chunk_size=o["chunk_size"], mamba_proj_bias=False, mamba_conv_bias=True,
                                    num_hidden_layers=1, attn_layer_indices=[]), 0)
    ours, theirs = from_ours(theirs, mixer(d, dict(o, norm_eps=theirs.norm.variance_epsilon)),
                             lambda m: renamed(m.state_dict(), {v: k for k, v in MAMBA2_HF_NAMES.items()}))
    return ours, theirs, lambda x: theirs(x)


def kda_pair(d: int, quick: bool):
    """Kimi Linear's KDA layer: 4 heads of d/4 (64 at d 256), conv 4; ours at its chunk 16, HF's at 64."""
    from transformers import KimiLinearConfig
    from transformers.models.kimi_linear.modeling_kimi_linear import KimiLinearDeltaAttention

    from arch_zoo.components.mixers import kda

    dim = d // 4
    theirs = KimiLinearDeltaAttention(KimiLinearConfig(
        hidden_size=d, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4,
        linear_attn_config={"num_heads": 4, "head_dim": dim, "kda_layers": [1], "short_conv_kernel_size": 4,
                            "full_attn_layers": []}), 0)
    ours, theirs = from_ours(theirs, mixer(d, {"name": "kda", "n_heads": 4, "head_dim": dim, "conv_size": 4,
                                               "norm_eps": theirs.o_norm.variance_epsilon}), kda.to_hf_layer)
    return ours, theirs, lambda x: theirs(x)


def rg_lru_pair(d: int, quick: bool):
    """RecurrentGemma's recurrent block: the RG-LRU d wide in 4 blocks, conv 4."""
    from transformers import RecurrentGemmaConfig
    from transformers.models.recurrent_gemma.modeling_recurrent_gemma import RecurrentGemmaRecurrentBlock

    from arch_zoo.components.mixers import rg_lru

    theirs = RecurrentGemmaRecurrentBlock(RecurrentGemmaConfig(hidden_size=d, lru_width=d, num_attention_heads=4,
                                                               conv1d_width=4, num_hidden_layers=1), 0)
    ours, theirs = from_ours(theirs, mixer(d, {"name": "rg_lru", "width": d, "n_heads": 4, "conv_size": 4}),
                             rg_lru.to_hf_layer)
    return ours, theirs, lambda x: theirs(x, torch.arange(x.shape[1]).expand(x.shape[0], -1), None,
                                          use_cache=False)[0]


def mlstm_pair(d: int, quick: bool):
    """xLSTM's mLSTM layer, 4 heads, chunk 64 (16 tiny), HF in its training mode (the chunkwise kernel) in
    float32 (its default autocasts the kernel to bfloat16)."""
    from transformers import xLSTMConfig
    from transformers.models.xlstm.modeling_xlstm import xLSTMLayer

    from arch_zoo.components.mixers import mlstm

    chunk = 16 if quick else 64
    theirs = xLSTMLayer(xLSTMConfig(hidden_size=d, num_heads=4, use_bias=False, mode="train", chunk_size=chunk,
                                    autocast_kernel_dtype="float32", num_hidden_layers=1))
    ours, theirs = from_ours(theirs, mixer(d, {"name": "mlstm", "n_heads": 4, "chunk_size": chunk}), mlstm.to_hf_layer)
    return ours, theirs, lambda x: theirs(x)[0]


def short_conv_pair(d: int, quick: bool):
    """LFM2's gated short convolution, 3 taps, no biases (LFM2's)."""
    from transformers import Lfm2Config
    from transformers.models.lfm2.modeling_lfm2 import Lfm2ShortConv

    from arch_zoo.components.mixers import short_conv

    theirs = Lfm2ShortConv(Lfm2Config(hidden_size=d, conv_L_cache=3, conv_bias=False, num_hidden_layers=1,
                                      layer_types=["conv"]), 0)
    ours, theirs = from_ours(theirs, mixer(d, {"name": "short_conv", "conv_size": 3}), short_conv.to_hf_layer)
    return ours, theirs, lambda x: theirs(x)


def lightning_pair(d: int, quick: bool):
    """MiniMax's lightning attention layer: 4 heads of d/4, block 64 (16 tiny); one layer of one (its decay
    is the depth's first)."""
    from transformers import MiniMaxConfig
    from transformers.models.minimax.modeling_minimax import MiniMaxLightningAttention

    from arch_zoo.components.mixers import lightning

    chunk = 16 if quick else 64
    theirs = MiniMaxLightningAttention(MiniMaxConfig(
        hidden_size=d, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4, head_dim=d // 4,
        block_size=chunk, layer_types=["linear_attention"]), 0)
    ours, theirs = from_ours(theirs, mixer(d, {"name": "lightning", "chunk_size": chunk}),
                             lambda m: lightning.to_hf_layer(m, theirs))
    return ours, theirs, lambda x: theirs(x, None, None)[0]


class Rotated(nn.Module):
    """A mixer called with the rotation its stack would hand it (RoPE over the positions of x); computed
    in the call, as the peer computes its cos / sin tables in its call."""

    def __init__(self, mixer: nn.Module, scheme: nn.Module):
        super().__init__()
        self.mixer, self.scheme = mixer, scheme

    def forward(self, x, inputs):
        at = torch.arange(x.shape[1])[None]
        return self.mixer(x, dataclasses.replace(inputs, rotate=self.scheme.rotator(at, at)))


def falcon_h1_pair(d: int, quick: bool):
    """Falcon-H1's layer without its norms and feed-forward: grouped-query attention (4 heads of d/4, 2 K/V
    heads) with RoPE beside Mamba-2 (1.5 d inner in heads of min(64, d/4), state as wide), as its decoder
    layer runs them (HF's torch path, sdpa attention); ours is the ``parallel`` mixer ``from_hf`` builds from
    a one-layer FalconH1ForCausalLM, on its weights. Weights of std d^-1/2, not Falcon-H1's 0.02: at 0.02 the
    outputs and q.k are so small that a missing rotation would pass the benchmark's equality check."""
    from transformers import FalconH1Config, FalconH1ForCausalLM

    from arch_zoo.interop import from_hf

    dim, chunk = min(64, d // 4), 16 if quick else 64
    config = FalconH1Config(vocab_size=32, hidden_size=d, intermediate_size=8, num_hidden_layers=1,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=d // 4, mamba_d_ssm=3 * d // 2,
                            mamba_n_heads=3 * d // 2 // dim, mamba_d_head=dim, mamba_d_state=dim, mamba_n_groups=1,
                            mamba_chunk_size=chunk, mamba_rms_norm=True, pad_token_id=0, initializer_range=d ** -0.5)
    config._attn_implementation = "sdpa"
    hf = FalconH1ForCausalLM(config)
    stack = from_hf(hf).decoder
    ours = Rotated(stack.layers[0].mixer.sublayer, stack.position)
    layer, rotary = hf.model.layers[0], hf.model.rotary_emb

    def call(x):
        at = torch.arange(x.shape[1])[None]
        attention = layer.self_attn(x * layer.attention_in_multiplier, attention_mask=None,
                                    position_embeddings=rotary(x, at))[0]
        return layer.mamba(x) * layer.ssm_out_multiplier + attention * layer.attn_out_multiplier
    return ours, nn.ModuleList([layer.self_attn, layer.mamba]), call  # the params column: the two mixers'


def loop_pair(options: Callable[[int, bool], dict]):
    """No transformers layer: the same layer and weights at chunk_size 1 (a Python loop over positions)."""
    def build(d: int, quick: bool):
        o = options(d, quick)
        ours = mixer(d, o)
        theirs = loaded(mixer(d, dict(o, chunk_size=1)), ours.state_dict())
        return ours, theirs, lambda x: theirs(x, ours_inputs())
    return build


def ours_inputs():
    from arch_zoo.components.masks import AttentionMask
    from arch_zoo.components.mixers import MixerInputs

    return MixerInputs(AttentionMask(None, True))


def rwkv7_options(d: int, quick: bool) -> dict:
    return {"name": "rwkv7", "n_heads": 4, "head_dim": d // 4}


def gdp_options(d: int, quick: bool) -> dict:
    """Gated DeltaNet's pair shape above with two delta steps a token."""
    dim = min(64, d // 4)
    return {"name": "gated_deltaproduct", "n_heads": 2, "n_v_heads": 4, "head_dim": dim, "v_head_dim": dim,
            "conv_size": 4, "chunk_size": 16 if quick else 64, "n_householder": 2}


PAIRS: Dict[str, Pair] = {
    "gated_deltanet": Pair(gdn_pair, "hf Qwen3NextGatedDeltaNet", False),
    "mamba2": Pair(mamba2_pair, "hf Mamba2Mixer", False),
    "mamba2_bamba": Pair(bamba_pair, "hf BambaMixer", True),
    "kda": Pair(kda_pair, "hf KimiLinearDeltaAttention", True),
    "rg_lru": Pair(rg_lru_pair, "hf RecurrentGemmaRecurrentBlock", True),
    "mlstm": Pair(mlstm_pair, "hf xLSTMLayer", True),
    "short_conv": Pair(short_conv_pair, "hf Lfm2ShortConv", True),
    "lightning": Pair(lightning_pair, "hf MiniMaxLightningAttention", True),
    "parallel": Pair(falcon_h1_pair, "hf FalconH1 attention + mamba", True),
    "rwkv7": Pair(loop_pair(rwkv7_options), "rwkv7 at chunk 1 (loop)", True),
    "gated_deltaproduct": Pair(loop_pair(gdp_options), "gated_deltaproduct at chunk 1 (loop)", True),
}
