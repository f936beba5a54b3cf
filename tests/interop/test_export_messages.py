"""Issue 55 §5: what the export says is right. The mixer layout decides which families can hold a model
and the reason names it with the nearest of those families' first mismatch; keys no layer reads decide
nothing; and neither the export nor loading the directory the way its model card says prints a warning
that is not so (a special id of another vocabulary, a tied head "newly initialized", an interactive
[y/N], a model "of type ''")."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from arch_zoo.coerce import to_dict
from arch_zoo.config.loading import model_config
from arch_zoo.experiment import load
from arch_zoo.data.tokenizers import CharTokenizer
from arch_zoo.models import build_model
from tests.interop.references import randomize

tf = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
GDN = {"mixer": {"name": "gated_deltanet"}}
# what transformers prints for each wrong message the issue met
WRONG = ["50256", "within the vocabulary", "MISSING", "newly initialized", "[y/N]", "to instantiate a model of type"]


def _config(preset: str, **changes):
    return model_config({**to_dict(load(f"preset:{preset}").model), **changes})


def hybrid():
    """A Gated DeltaNet hybrid with plain RMSNorm and no position scheme, from GPT-2's preset (the
    export once named GPT-2 for it: 'position none has no GPT-2 equivalent')."""
    return _config("gpt2-tiny", n_layers=4, position="none", norm="rmsnorm", bias=False,
                   layers=[{"pattern": [GDN, GDN, GDN, {}]}])


def mamba2():
    """A pure Mamba-2 model whose model-level n_heads (8) is read by no layer: its mixer has 6 heads."""
    return _config("mamba2-tiny", d_model=48, n_heads=8, d_ff=100,
                   mixer={"name": "mamba2", "n_heads": 6, "state_size": 16, "chunk_size": 8})


def _sized(cfg, vocab=26):
    return model_config({**to_dict(cfg), "vocab_size": vocab})


def test_the_mixer_layout_decides_the_family_and_the_reason_names_it_with_the_nearest_mismatch():
    from arch_zoo.interop.export_hf import native_config

    assert native_config(_sized(hybrid())).reason == (
        "its mixer layout (gated_deltanet x3 + attention) fits Qwen3-Next only: position none has no Qwen3-Next "
        "equivalent")
    attention = _sized(_config("llama-tiny", position="alibi"))
    assert native_config(attention).reason == ("its mixer layout (attention x2) fits 14 families, of which Llama is "
                                               "the nearest: position alibi has no Llama equivalent")
    mixed = _sized(_config("llama-tiny", n_layers=4, position="none", layers=[{"range": "0:3", **GDN},
                                                                             {"range": "3:", "mixer": "mamba2"}]))
    assert native_config(mixed).reason == ("its mixer layout (gated_deltanet x3 + mamba2) is no Hugging Face "
                                           "family's")


def test_keys_no_layer_reads_do_not_decide_the_family():
    """n_heads 8 and d_ff 100 are read by no layer of a pure Mamba-2 model: it leaves as Mamba-2, computing
    what arch_zoo computes; where its mixer's heads are left null, the model's n_heads is read and counts."""
    from arch_zoo.interop import to_hf
    from arch_zoo.interop.export_hf import native_config

    assert native_config(_sized(mamba2())).reason == "written as Mamba2ForCausalLM"
    torch.manual_seed(0)
    model = randomize(build_model(mamba2(), 26), 0).eval()
    hf = to_hf(model)
    assert hf.config.num_heads == 6 and hf.config.head_dim == 16
    ids = torch.randint(3, 26, (2, 11))
    with torch.no_grad():
        assert torch.allclose(hf(input_ids=ids).logits, model(ids).logits, atol=1e-4, rtol=0)
    own = _config("mamba2-tiny", d_model=48, n_heads=6, mixer={"name": "mamba2", "state_size": 16, "chunk_size": 8})
    assert native_config(_sized(own)).reason == "written as Mamba2ForCausalLM"
    assert to_hf(build_model(own, 26)).config.num_heads == 6  # left null, its heads are the model's: they count


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Each model exported with a char tokenizer (bos 1) and loaded in a fresh process by its model
    card's snippet, stdin closed (a prompt would read nothing)."""
    from arch_zoo.interop import save_hf

    root = tmp_path_factory.mktemp("export_messages")
    tokenizer = CharTokenizer().fit(["hello world, abcdefghijklmnopqrs"])
    cases = {"hybrid": hybrid(), "gpt2": _config("gpt2-tiny"), "mamba2": mamba2()}
    models, forms, jobs, logs = {}, {}, [], {}
    for name, cfg in cases.items():
        torch.manual_seed(0)
        models[name] = randomize(build_model(cfg, tokenizer.vocab_size), 0).eval()
        forms[name] = save_hf(models[name], tokenizer, root / name)
        jobs.append({"dir": str(root / name), "ids": torch.tensor([[4, 9, 12, 7, 15], [6, 6, 8, 10, 11]]),
                     "text": "hello world"})
    torch.save(jobs, root / "jobs.pt")
    command = [sys.executable, "-m", "tests.interop.card_load", str(root / "jobs.pt"), str(root / "out.pt")]
    proc = subprocess.run(command,
                          cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HOME": str(root / "hf_home"),
                               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONWARNINGS": "always"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return models, forms, tokenizer, jobs, torch.load(root / "out.pt"), proc.stdout + proc.stderr


EXPORT = """
import json, sys
from arch_zoo.experiment import load
from arch_zoo.data.tokenizers import CharTokenizer
from arch_zoo.interop import save_hf
from arch_zoo.models import build_model

tokenizer = CharTokenizer().fit(["hello world, abcdefghijklmnopqrs"])
save_hf(build_model(load("preset:gpt2-tiny").model, tokenizer.vocab_size), tokenizer, sys.argv[1])
print(json.dumps([tokenizer.vocab_size, tokenizer.bos_id, tokenizer.eos_id]))
"""


def test_the_export_prints_no_special_id_of_another_vocabulary(tmp_path):
    """GPT-2's config defaults bos and eos to 50256; a char tokenizer's are 1 and 2 of a few dozen, and
    config.json says so. In a fresh process: transformers prints each such warning once per process."""
    import json

    proc = subprocess.run([sys.executable, "-c", EXPORT, str(tmp_path / "gpt2")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = proc.stdout + proc.stderr
    assert not [w for w in WRONG[:2] if w in printed], printed
    vocab, bos, eos = json.loads(proc.stdout.splitlines()[-1])
    config = json.loads((tmp_path / "gpt2" / "config.json").read_text())
    assert (config["vocab_size"], config["bos_token_id"], config["eos_token_id"]) == (vocab, bos, eos)
    assert (bos, eos) == (1, 2) and vocab < 50256


def test_loading_as_the_model_card_says_prints_no_wrong_warning_and_gives_the_models_function(exported):
    models, forms, tokenizer, jobs, results, printed = exported
    assert not [w for w in WRONG if w in printed], printed
    assert forms["hybrid"].startswith("written as arch_zoo remote code: its mixer layout (gated_deltanet x3")
    assert (forms["gpt2"], forms["mamba2"]) == ("written as GPT2LMHeadModel", "written as Mamba2ForCausalLM")
    for job in jobs:
        name = Path(job["dir"]).name
        got, model = results[job["dir"]], models[name]
        with torch.no_grad():
            assert torch.allclose(got["logits"], model(job["ids"]).logits, atol=1e-4, rtol=0), name
        assert got["ids"] == tokenizer.encode(job["text"]), name
    tied = models["hybrid"]
    assert tied.head.proj.weight is tied.embed.weight  # the head the load report called "newly initialized"
