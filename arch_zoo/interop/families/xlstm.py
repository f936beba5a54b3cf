"""xLSTM (``xLSTMForCausalLM``, ``xLSTMModel``; xLSTM-7B, Beck et al. 2025): pre-norm blocks of
x + mLSTM(rmsnorm(x)) then x + SwiGLU(rmsnorm(x)), no attention and no positions; a final RMSNorm
(transformers builds it whatever ``add_out_norm`` says), an untied head and soft-capped logits.

What is its own: the ``mlstm`` mixer (q and k ``qk_dim_factor`` x hidden wide, v ``v_dim_factor`` x
hidden, gates soft-capped at ``gate_soft_cap``, a layer norm per head); the feed-forward's width
``ffn_proj_factor`` x hidden rounded up to a multiple of ``ffn_round_up_to_multiple_of``. Only
``weight_mode: single`` is read and written (``fused`` stores the same tensors concatenated), and only
``use_bias: false`` (with it, transformers' RMSNorms carry biases arch_zoo's do not).

transformers' forward takes no attention mask: pads are run through the recurrence like tokens, so a
left-padded row's real positions depend on its pads there. arch_zoo skips them (a pad writes nothing to
the state), so a left-padded row computes what HF computes for the row alone (the tests compare it so).
HF's ``chunk_size`` is carried to the mixer's; in HF it also picks the kernel (sequences of whole
chunks run the chunkwise kernel, which stabilises per chunk and so moves eps's share of the
denominator, far below the tolerance; the recurrent kernel runs what is shorter)."""
from __future__ import annotations

from typing import Any, Dict

from ...config import ModelConfig
from ...config.validation import layer_configs
from ..checkpoint import WeightMap
from ..family import HFFamily, register, unsupported
from ..mapping import PARAMS, NotExpressible, common, copy_each, decoder_layers, dense_mlp, shared_keys, spec

MLSTM = ("q", "k", "v", "ogate_preact", "igate_preact", "fgate_preact", "multihead_norm", ("out", "out_proj"))
FFN_FACTOR, FFN_MULTIPLE = 2.667, 64  # xLSTMConfig's defaults (xLSTM-7B's)
MAX_SEQ_LEN = 8192  # HF's config has no length (an export writes one for the way back); xLSTM-7B's context


def round_up(x: float, multiple: int) -> int:
    """transformers' ``round_up_to_next_multiple_of`` (the feed-forward's width)."""
    return int(((x + multiple - 1) // multiple) * multiple)


def config(c: dict, weights: WeightMap) -> dict:
    if c.get("weight_mode", "single") != "single":
        raise unsupported("xlstm", f"weight_mode '{c['weight_mode']}' (only 'single' is read)")
    if c.get("use_bias", False):
        raise unsupported("xlstm", "use_bias true (its RMSNorms' biases)")
    hidden = c.get("hidden_size") or c["embedding_dim"]
    eps = c.get("norm_eps", 1e-6)
    cap = c.get("output_logit_soft_cap", 30.0)
    return {
        "kind": "decoder", "vocab_size": c["vocab_size"], "d_model": hidden,
        "n_layers": c.get("num_hidden_layers") or c["num_blocks"], "n_heads": c.get("num_heads", 8),
        "max_seq_len": c.get("max_position_embeddings", MAX_SEQ_LEN), "position": "none",
        "mixer": {"name": "mlstm", "qk_dim_factor": c.get("qk_dim_factor", 0.5),
                  "v_dim_factor": c.get("v_dim_factor", 1.0), "gate_soft_cap": c.get("gate_soft_cap", 15.0),
                  "norm_eps": eps, "eps": c.get("eps", 1e-6), "chunk_size": c.get("chunk_size", 64)},
        "d_ff": round_up(hidden * c.get("ffn_proj_factor", FFN_FACTOR),
                         c.get("ffn_round_up_to_multiple_of", FFN_MULTIPLE)),
        "norm": {"name": "rmsnorm", "eps": eps}, "norm_placement": "pre", "final_norm": True,
        "ffn": "swiglu", "bias": False, "final_logit_softcap": None if cap is None else float(cap),
        **shared_keys(c, tie=False), "dropout": 0.0,
    }


def weights(w: WeightMap, cfg: ModelConfig) -> None:
    for _, a, h in decoder_layers(w, cfg, norms=("norm_mlstm", "norm_ffn"), embed="embeddings", final="out_norm",
                                  layers="blocks"):
        copy_each(w, f"{a}mixer.sublayer.", f"{h}mlstm_layer.", [(x, x) if isinstance(x, str) else x for x in MLSTM],
                  PARAMS)
        dense_mlp(w, f"{a}ffn.sublayer.", f"{h}ffn.", names=("proj_up_gate", "proj_up", "proj_down"))
    if not cfg.tie_embeddings:
        w.copy("head.proj.weight", "lm_head.weight")


def ffn_sizes(d_model: int, d_ff: int) -> Dict[str, Any]:
    """The (factor, multiple) HF rounds back to ``d_ff``: xLSTM-7B's where they give it, else exact ones."""
    for factor, multiple in ((FFN_FACTOR, FFN_MULTIPLE), (d_ff / d_model, 1), (d_ff / d_model, d_ff)):
        if round_up(d_model * factor, multiple) == d_ff:
            return {"ffn_proj_factor": factor, "ffn_round_up_to_multiple_of": multiple}
    raise NotExpressible(f"d_ff {d_ff}")


def write(m: ModelConfig, d: dict) -> Dict[str, Any]:
    """Writes what the layers hold; the export's round trip through ``config`` judges the rest."""
    layers = layer_configs(m, "decoder", m.decoder_layers)
    for layer in layers:
        if layer.mixer.name != "mlstm":
            raise NotExpressible(f"mixer {layer.mixer.name}")  # every xLSTM-7B block is an mLSTM
    options = {layer.mixer.options.resolved(layer) for layer in layers}
    if len(options) > 1:
        raise NotExpressible(f"mlstm options differing between layers {sorted(map(str, options))}")
    o = options.pop()
    if o.bias:
        raise NotExpressible("bias true")
    for what, cap in (("gate_soft_cap", o.gate_soft_cap), ("final_logit_softcap", m.final_logit_softcap)):
        if cap is None:
            raise NotExpressible(f"{what} null")  # xLSTMConfig takes a float for each: HF always caps
    return {**common(m, d), "model_type": "xlstm", "architectures": ["xLSTMForCausalLM"],
            "hidden_size": m.d_model, "embedding_dim": m.d_model, "num_hidden_layers": m.n_layers,
            "num_blocks": m.n_layers, "num_heads": o.n_heads, "qk_dim_factor": o.qk_dim_factor,
            "v_dim_factor": o.v_dim_factor, "gate_soft_cap": o.gate_soft_cap, "eps": o.eps,
            "chunk_size": o.chunk_size, "norm_eps": spec(d, "norm").get("eps", 1e-6), "use_bias": False,
            "weight_mode": "single", "output_logit_soft_cap": m.final_logit_softcap,
            **ffn_sizes(m.d_model, m.d_ff), "mode": "inference",
            "pad_token_id": m.pad_token_id,
            "max_position_embeddings": m.max_seq_len}  # not xLSTMConfig's field: kept for the way back


FAMILY = register(HFFamily("xlstm", "xLSTM", config, weights, write, mixers=("mlstm",), prefix="backbone."))
