"""Issue 41 §1-4: arch_zoo models exported for Hugging Face, checked as the anchors check them.

Every imported family, and three architectures no family expresses (ALiBi with grouped-query
attention, sandwich norms with RoPE, the sinusoidal encoder-decoder), is randomised, exported, and
loaded by transformers alone in a fresh process (``trust_remote_code`` for the remote-code form):
its logits on left- and right-padded batches must equal arch_zoo's to 1e-4 and ``generate``'s greedy
tokens must be arch_zoo's. Round trips: ``to_hf(from_hf(m))`` gives the Hugging Face tensors back bit
for bit, and ``from_hf(to_hf(x))`` rebuilds x's tensors and function."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from arch_zoo.coerce import to_dict
from arch_zoo.config.loading import model_config
from arch_zoo.experiment import load
from arch_zoo.models import build_model
from tests.interop.references import VOCAB, padded_batch, randomize

tf = pytest.importorskip("transformers")

ATOL = 1e-4
ROOT = Path(__file__).resolve().parents[2]
# preset -> the class the export must choose, from the config's fields alone
NATIVE = {"gpt2-tiny": "GPT2LMHeadModel", "llama-tiny": "LlamaForCausalLM", "mistral-tiny": "MistralForCausalLM",
          "qwen3-tiny": "Qwen3ForCausalLM", "mixtral-tiny": "MixtralForCausalLM", "gemma2-tiny": "Gemma2ForCausalLM",
          "pythia-tiny": "GPTNeoXForCausalLM", "bloom-tiny": "BloomForCausalLM", "bert-tiny": "BertForMaskedLM",
          "t5-tiny": "T5ForConditionalGeneration"}
NATIVE.update({"mamba2-tiny": "Mamba2ForCausalLM", "qwen3-next-tiny": "Qwen3NextForCausalLM",
               "lfm2-tiny": "Lfm2ForCausalLM", "bamba-tiny": "BambaForCausalLM"})  # the mixer families
NATIVE.update({"deepseek-v3-tiny": "DeepseekV3ForCausalLM", "diffllama-tiny": "DiffLlamaForCausalLM"})
# no family has a field for these: remote code, and the command says which field
REMOTE = {"alibi-gqa": ("llama-tiny", {"position": "alibi", "n_kv_heads": 2}, "position alibi has no Llama equivalent"),
          "sandwich-rope": ("llama-tiny", {"norm_placement": "sandwich"}, "norm_placement sandwich has no Llama"),
          "vaswani": ("vaswani-tiny", {}, "has no T5 equivalent"),
          # transformers 5 always ties T5's output projection to its embedding
          "t5-v1_1": ("t5-v1_1-tiny", {}, "tie_embeddings False has no T5 equivalent")}
AUTO = {"decoder": "AutoModelForCausalLM", "encoder": "AutoModelForMaskedLM", "encoder_decoder": "AutoModelForSeq2SeqLM"}


def arch_model(preset: str, changes=None, seed: int = 0):
    cfg = model_config({**to_dict(load(f"preset:{preset}").model), **(changes or {})})
    torch.manual_seed(seed)
    return randomize(build_model(cfg, VOCAB), seed).eval()


def _inputs(kind):
    job = {}
    for side in ("right", "left"):
        job[side] = padded_batch([7, 12, 3], 12, side, low=3)
        if kind == "encoder_decoder":
            job[f"{side}_decoder"] = padded_batch([5, 1, 6], 6, side, seed=2, low=3)
    return job


def _ours(model, job, side):
    ids, mask = job[side]
    with torch.no_grad():
        if model.config.kind == "encoder_decoder":
            dec, dec_mask = job[f"{side}_decoder"]
            return model(ids, dec, mask, dec_mask).logits[dec_mask.bool()]
        return model(ids, mask).logits[mask.bool()]


def _cut(tokens, eos):
    return tokens[:tokens.index(eos) + 1] if eos is not None and eos in tokens else tokens


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Every case exported, then loaded in one fresh process (transformers alone)."""
    from arch_zoo.interop import save_hf

    root = tmp_path_factory.mktemp("export_hf")
    cases = {name: (arch_model(name), None) for name in NATIVE}
    cases.update({name: (arch_model(preset, changes), why) for name, (preset, changes, why) in REMOTE.items()})
    jobs, forms = [], {}
    for name, (model, _) in cases.items():
        out = root / name
        forms[name] = save_hf(model, None, out, max_shard_size="40KB" if name == "llama-tiny" else "5GB")
        job = {"dir": str(out), "auto_class": AUTO[model.config.kind], "remote": "remote" in forms[name],
               "prompts": [[5, 9, 14, 3], [7]], "new_tokens": 6, **_inputs(model.config.kind)}
        jobs.append(job)
    torch.save(jobs, root / "jobs.pt")
    subprocess.run([sys.executable, "-m", "tests.interop.hf_load", str(root / "jobs.pt"), str(root / "out.pt")],
                   cwd=ROOT, check=True, env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HOME": str(root / "hf_home"),
                                              "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    return cases, forms, {j["dir"]: j for j in jobs}, torch.load(root / "out.pt")


@pytest.mark.parametrize("name", sorted(NATIVE) + sorted(REMOTE))
def test_an_exported_model_loads_in_transformers_with_the_same_logits_and_greedy_tokens(exported, name):
    cases, forms, jobs, results = exported
    model, why = cases[name]
    out = Path(jobs[next(d for d in jobs if d.endswith(f"/{name}"))]["dir"])
    if why is None:
        assert forms[name] == f"written as {NATIVE[name]}"
        assert json.loads((out / "config.json").read_text())["architectures"] == [NATIVE[name]]
    else:
        assert forms[name].startswith("written as arch_zoo remote code: ") and why in forms[name]
        assert "auto_map" in json.loads((out / "config.json").read_text())
    job, got = jobs[str(out)], results[str(out)]
    for side in ("right", "left"):
        mask = job[f"{side}_decoder" if model.config.kind == "encoder_decoder" else side][1]
        theirs = got[side][mask.bool()]
        assert torch.allclose(theirs, _ours(model, job, side), atol=ATOL, rtol=0), (name, side)
    if model.config.kind == "encoder":
        return
    from arch_zoo.generation import generate

    config = json.loads((out / "config.json").read_text())
    eos = config.get("eos_token_id")
    start = config.get("decoder_start_token_id", 0) if model.config.kind == "encoder_decoder" else None
    for prompt, theirs in zip(job["prompts"], got["greedy"]):
        ours = generate(model, [prompt], max_new_tokens=job["new_tokens"], eos_token_id=eos,
                        decoder_start_token_id=start).to_lists()[0][0]
        new = theirs[len(prompt):] if model.config.kind == "decoder" else theirs[1:]
        assert _cut(new, eos) == _cut(ours, eos), name


def test_a_model_past_the_shard_size_is_sharded_with_an_index(exported):
    from arch_zoo.interop import load_hf_checkpoint

    cases, _, jobs, _ = exported
    out = Path(next(d for d in jobs if d.endswith("/llama-tiny")))
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shards = set(index["weight_map"].values())
    assert len(shards) > 1 and all((out / s).is_file() for s in shards) and not (out / "model.safetensors").exists()
    back = load_hf_checkpoint(out)  # arch_zoo reads the shards back without transformers
    ours = cases["llama-tiny"][0].state_dict()
    assert all(torch.equal(v, ours[k]) for k, v in back.state_dict().items())


def _hf_family(name):
    """A random Hugging Face model of each imported family (configs at tiny sizes, nothing downloaded)."""
    small = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 max_position_embeddings=32)
    gqa = dict(small, num_key_value_heads=2)
    families = {
        "gpt2": (tf.GPT2Config, tf.GPT2LMHeadModel, dict(n_embd=32, n_layer=2, n_head=2, n_positions=32)),
        "llama": (tf.LlamaConfig, tf.LlamaForCausalLM, gqa),
        "mistral": (tf.MistralConfig, tf.MistralForCausalLM, dict(gqa, sliding_window=4)),
        "qwen3": (tf.Qwen3Config, tf.Qwen3ForCausalLM, dict(gqa, head_dim=8)),
        "mixtral": (tf.MixtralConfig, tf.MixtralForCausalLM, dict(gqa, num_local_experts=4, num_experts_per_tok=2)),
        "gemma2": (tf.Gemma2Config, tf.Gemma2ForCausalLM, dict(gqa, head_dim=8, sliding_window=4,
                                                                query_pre_attn_scalar=8)),
        "gpt_neox": (tf.GPTNeoXConfig, tf.GPTNeoXForCausalLM, small),
        "bloom": (tf.BloomConfig, tf.BloomForCausalLM, dict(hidden_size=32, n_layer=2, n_head=4)),
        "bert": (tf.BertConfig, tf.BertForMaskedLM, small),
        "t5": (tf.T5Config, tf.T5ForConditionalGeneration, dict(d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                                                 num_heads=4, relative_attention_num_buckets=8,
                                                                 relative_attention_max_distance=16)),
        "t5-v1_1": (tf.T5Config, tf.T5ForConditionalGeneration, dict(d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                                                      num_heads=4, feed_forward_proj="gated-gelu")),
    }
    config, cls, sizes = families[name]
    torch.manual_seed(0)
    return randomize(cls(config(vocab_size=VOCAB, **sizes))).eval()


@pytest.mark.parametrize("name", ["bert", "bloom", "gemma2", "gpt2", "gpt_neox", "llama", "mistral", "mixtral",
                                  "qwen3", "t5", "t5-v1_1"])
def test_to_hf_of_from_hf_gives_the_reference_tensors_back(name):
    from arch_zoo.interop import from_hf, to_hf

    ref = _hf_family(name)
    back = to_hf(from_hf(ref))
    assert type(back) is type(ref)
    theirs, ours = ref.state_dict(), back.state_dict()
    assert set(theirs) == set(ours)
    for key, value in theirs.items():
        assert torch.equal(ours[key], value), key  # Gemma 2's norm weights w too: kept as w, applied as 1 + w


@pytest.mark.parametrize("preset", sorted(NATIVE))
def test_from_hf_of_to_hf_rebuilds_the_model(preset):
    from arch_zoo.interop import from_hf, to_hf
    from arch_zoo.interop.export_hf import sized
    from arch_zoo.interop.function_view import function_view

    model = arch_model(preset)
    again = from_hf(to_hf(model))
    assert function_view(again.config) == function_view(sized(model))
    ours, back = model.state_dict(), again.state_dict()
    assert set(ours) == set(back)
    assert all(torch.equal(back[k], v) for k, v in ours.items())


def test_the_family_follows_the_fields_not_the_preset_name():
    """A Llama preset turned into GPT-2 by its fields exports as GPT-2; one field no family has turns
    a GPT-2 preset into remote code naming that field."""
    from arch_zoo.interop.export_hf import native_config

    gpt2 = to_dict(load("preset:gpt2-tiny").model)
    as_gpt2 = model_config({**to_dict(load("preset:llama-tiny").model), **{k: gpt2[k] for k in gpt2 if k != "layers"},
                            "vocab_size": VOCAB})
    assert native_config(as_gpt2).reason == "written as GPT2LMHeadModel"
    rmsnorm = model_config({**gpt2, "norm": "rmsnorm", "vocab_size": VOCAB})
    assert native_config(rmsnorm).hf_config is None
    assert "norm rmsnorm has no GPT-2 equivalent" in native_config(rmsnorm).reason


@pytest.mark.parametrize("name", ["mamba2", "qwen3_next"])
def test_to_hf_of_from_hf_gives_the_mixer_families_tensors_back(name):
    """Mamba-2 and Qwen3-Next at their import tests' tiny random configs; Qwen3-Next's fused and
    interleaved projections (q with its gate, in_proj_qkvz, in_proj_ba, the experts' gate_up_proj) are
    regrouped on the way in and must come back row for row."""
    from tests.interop import test_hf_mamba2, test_hf_qwen3_next
    from tests.interop.references import assert_round_trip

    module = {"mamba2": test_hf_mamba2, "qwen3_next": test_hf_qwen3_next}[name]
    cls = {"mamba2": tf.Mamba2ForCausalLM, "qwen3_next": tf.Qwen3NextForCausalLM}[name]
    torch.manual_seed(0)
    assert_round_trip(randomize(cls(module.hf_config())).eval())


def test_a_mixer_left_to_its_defaults_is_written_as_its_family():
    """Mixer options left null (heads and widths from the model) equal the numbers a family writes, and a
    chunk size changes how a mixer computes, not what: such models are still Mamba-2 and Qwen3-Next. An
    option the family has no field for is named."""
    from arch_zoo.interop import to_hf
    from arch_zoo.interop.export_hf import native_config, sized

    gdn = {"mixer": {"name": "gated_deltanet", "l2norm": "rsqrt", "chunk_size": 4}}
    models = {"Mamba2ForCausalLM": arch_model("mamba2-tiny", {"mixer": {"name": "mamba2", "n_groups": 2}}),
              "Qwen3NextForCausalLM": arch_model("qwen3-next-tiny", {"layers": [{"pattern": [gdn, gdn, gdn, {}]}]})}
    for cls, model in models.items():
        assert native_config(sized(model)).reason == f"written as {cls}"
        hf = to_hf(model)
        ids, mask = padded_batch([7, 12, 3], 12, "left", low=3)
        with torch.no_grad():
            theirs = hf(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0)
                        if cls.startswith("Qwen") else None).logits[mask.bool()]
            assert torch.allclose(theirs, model(ids, mask).logits[mask.bool()], atol=ATOL, rtol=0), cls
    clamp = {"mixer": {**gdn["mixer"], "l2norm": "clamp"}}
    other = model_config({**to_dict(load("preset:qwen3-next-tiny").model), "vocab_size": VOCAB,
                          "layers": [{"pattern": [clamp, clamp, clamp, {}]}]})
    assert native_config(other).reason == ("its mixer layout (gated_deltanet x3 + attention) fits Qwen3-Next only: "
                                           "mixer.l2norm clamp (decoder layer 0) has no Qwen3-Next equivalent")
