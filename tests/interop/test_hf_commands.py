"""Issue 41: the round trip in two commands (``arch-zoo import``, ``arch-zoo export --to hf``), the
tokenizer files of every arch_zoo tokenizer, and lm_eval's ``hf`` model on an exported run scoring
as ``arch-zoo eval`` scores the run."""
import json

import pytest
import torch

from arch_zoo.cli import main
from tests.evaluation.helpers import TEXT, bos_tokenizer, in_task_dir, tiny_llama, tiny_run

tf = pytest.importorskip("transformers")


def test_import_then_export_gives_the_checkpoint_back(tmp_path, capsys):
    from safetensors.torch import load_file

    hf_dir = tiny_llama(tmp_path / "hf")
    assert main(["import", str(hf_dir), "--out", str(tmp_path / "run")]) == 0
    assert main(["export", str(tmp_path / "run"), "--to", "hf", "--out", str(tmp_path / "back")]) == 0
    assert "written as LlamaForCausalLM" in capsys.readouterr().out
    theirs, ours = load_file(hf_dir / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors")
    assert set(theirs) == set(ours) and all(torch.equal(theirs[k], ours[k]) for k in theirs)
    a, b = (tf.AutoTokenizer.from_pretrained(d) for d in (hf_dir, tmp_path / "back"))
    for text in TEXT[:6] + ["unseen words, and <s> inside"]:
        assert a.encode(text) == b.encode(text) and a(text)["input_ids"] == b(text)["input_ids"]
    assert (a.bos_token, a.eos_token, a.unk_token) == (b.bos_token, b.eos_token, b.unk_token)
    card = (tmp_path / "back" / "README.md").read_text()
    assert "LlamaForCausalLM" in card and "arch_zoo 0." in card and "kind: decoder" in card
    assert "- weights: checkpoint `last.ckpt`" in card
    assert sorted(p.name for p in (tmp_path / "back").iterdir()) == sorted(
        ["README.md", "config.json", "generation_config.json", "model.safetensors", "special_tokens_map.json",
         "tokenizer.json", "tokenizer_config.json"])


def test_generate_on_an_imported_llama_starts_the_prompt_with_bos_as_its_tokenizer_does(tmp_path, capsys):
    """`tokenizer(prompt)` and Hugging Face's text-generation pipeline put a Llama tokenizer's <s>
    first; `arch-zoo generate` on the imported run does too, and prints Hugging Face's greedy text."""
    from arch_zoo import restore
    from arch_zoo.trained.restore import prompt_ids

    hf_dir = tiny_llama(tmp_path / "hf")
    assert main(["import", str(hf_dir), "--out", str(tmp_path / "run")]) == 0
    fast, hf = tf.AutoTokenizer.from_pretrained(hf_dir), tf.AutoModelForCausalLM.from_pretrained(hf_dir).eval()
    prompt = TEXT[0].split(".")[0]
    ids = fast(prompt).input_ids
    assert ids[0] == fast.bos_token_id and ids[1:] == fast(prompt, add_special_tokens=False).input_ids

    def greedy(ids):
        out = hf.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                          max_new_tokens=6, do_sample=False, pad_token_id=fast.eos_token_id)
        return fast.decode(out[0, len(ids):], skip_special_tokens=True)

    cfg, _, tokenizer = restore(tmp_path / "run")
    assert prompt_ids(cfg, tokenizer, prompt) == ids
    capsys.readouterr()
    assert main(["generate", str(tmp_path / "run"), "--prompt", prompt, "--max-new-tokens", "6"]) == 0
    assert capsys.readouterr().out == greedy(ids) + "\n"


@pytest.mark.parametrize("spec", ["char", "word", "byte", {"name": "bpe", "vocab_size": 300}])
def test_every_tokenizer_is_written_so_that_auto_tokenizer_gives_the_same_ids(spec, tmp_path):
    from arch_zoo.data.tokenizers import build_tokenizer, parse_tokenizer
    from arch_zoo.interop.hf_tokenizer import write_hf_tokenizer

    texts = ["the cat sat\non the mat", "été à Zürich, 日本語  and\ttabs", "two plus two is four"]
    ours = build_tokenizer(parse_tokenizer(spec)).fit(texts * 3)
    write_hf_tokenizer(ours, tmp_path, 64)
    theirs = tf.AutoTokenizer.from_pretrained(tmp_path)
    for text in texts + ["never seen: qxj", ""]:
        ids = ours.encode(text)
        assert theirs.encode(text) == ids, text
        assert theirs.decode(ids, skip_special_tokens=True) == ours.decode(ids)
    assert (theirs.eos_token_id, theirs.pad_token_id, theirs.bos_token_id) == (ours.eos_id, ours.pad_id, None)


@pytest.mark.parametrize("position", ["rope", "alibi"])  # a native GPT-NeoX, and remote code
def test_lm_evals_hf_model_on_the_export_scores_as_arch_zoo_eval_on_the_run(position, tmp_path):
    """A run trained here (its tokenizer's post-processor would add <s>; training never saw it): the
    export names no BOS and adds nothing, so ``hf`` starts contexts with EOS, as arch_zoo does."""
    pytest.importorskip("accelerate", reason="lm_eval's hf model needs accelerate (the test extra installs it)")
    from lm_eval.models.huggingface import HFLM

    from arch_zoo.evaluation import ArchZooLM
    from arch_zoo.training.export import export_run
    from tests.evaluation.test_lm_eval import MAX_LENGTH, TASKS, _samples

    run = tiny_run(tmp_path / "run", position=position, tokenizer=bos_tokenizer)
    form = export_run(run, tmp_path / "hf").form
    assert ("remote code" in form) == (position == "alibi")
    theirs_lm = HFLM(pretrained=str(tmp_path / "hf"), device="cpu", batch_size=4, dtype="float32",
                     max_length=MAX_LENGTH, trust_remote_code=True)
    ours_lm = ArchZooLM(run=str(run), device="cpu", batch_size=4, max_length=MAX_LENGTH)
    assert ours_lm.prefix_token_id == theirs_lm.prefix_token_id == ours_lm.eot_token_id
    with in_task_dir() as task_dir:
        _, theirs = _samples(theirs_lm, task_dir)
        _, ours = _samples(ours_lm, task_dir)
    for task in TASKS:
        for mine, ref in zip(ours[task], theirs[task]):
            for a, b in zip(mine["resps"], ref["resps"]):
                a, b = a[0], b[0]
                if task == "zoo_gen":
                    assert a == b
                elif task == "zoo_choice":
                    assert a[0] == pytest.approx(b[0], abs=1e-4) and a[1] == b[1]
                else:
                    assert a == pytest.approx(b, abs=1e-4)
    assert json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())["bos_token"] is None


def test_a_plugins_model_leaves_as_remote_code_with_the_plugin_file_and_its_sha256(tmp_path):
    """A norm registered by a plugin file has no family: the export copies the file beside the
    modelling code, and a fresh process (transformers alone, arch_zoo installed) rebuilds the model."""
    import hashlib
    import os
    import subprocess
    import sys

    import yaml

    from arch_zoo import restore
    from arch_zoo.config import plugins
    from arch_zoo.experiment import all_registries
    from arch_zoo.training.export import export_run
    from tests.test_plugins import TINY, forget_plugins

    source = ("from arch_zoo.components.norms import NORMS, RMSNorm, RMSNormOptions\n"
              "NORMS.register('exported_rms', RMSNormOptions, 'RMSNorm by another name')(\n"
              "    type('ExportedRMS', (RMSNorm,), {}))\n")
    (tmp_path / "exported_norm.py").write_text(source)
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump({"name": "p", "plugins": ["exported_norm.py"],
                                                       "model": {"kind": "decoder", "norm": "exported_rms", "position": "rope",
                                                                 "ffn": "swiglu", "bias": False, "tie_embeddings": False},
                                                       "task": {"name": "char_lm"}}))
    before = ({family: dict(reg._entries) for family, reg in all_registries().items()}, dict(plugins._loaded))
    try:
        assert main(["train", str(tmp_path / "exp.yaml"), "--out", str(tmp_path / "run"), "--quiet", *TINY]) == 0
        form = export_run(tmp_path / "run", tmp_path / "hf").form
        _, model, tok = restore(tmp_path / "run")
    finally:
        forget_plugins(before)
    assert form == ("written as arch_zoo remote code: its mixer layout (attention) fits 14 families, of which "
                    "Llama is the nearest: norm exported_rms has no Llama equivalent")
    kept = json.loads((tmp_path / "hf" / "config.json").read_text())["arch_zoo_plugins"]
    assert [hashlib.sha256((tmp_path / "hf" / p["file"]).read_bytes()).hexdigest() for p in kept] == \
        [hashlib.sha256(source.encode()).hexdigest()]
    ids = tok.encode("def main():")
    code = ("import sys, torch\nfrom transformers import AutoModelForCausalLM\n"
            "m = AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True)\n"
            "torch.save(m(torch.tensor([eval(sys.argv[2])])).logits, sys.argv[3])\n")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "hf"), str(ids), str(tmp_path / "logits.pt")],
                   check=True, cwd=tmp_path, env={**os.environ, "HF_HOME": str(tmp_path / "hf_home"),
                                                  "HF_HUB_OFFLINE": "1"})
    with torch.no_grad():
        ours = model(torch.tensor([ids])).logits
    assert torch.allclose(torch.load(tmp_path / "logits.pt"), ours, atol=1e-5)
