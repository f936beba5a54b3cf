"""Issue 55, item 2: checkpoints published with more embedding rows than their tokenizer has tokens
(t5-small, Pythia, Qwen3; built tiny here by each family's padding rule, tests/interop/padded_vocab.py)
import by command. The run keeps every row (logits equal Hugging Face's over all of them), the
tokenizer keeps its size, decoding (``generate``, ``arch-zoo generate``, lm_eval's generate_until)
chooses what Hugging Face chooses with the padded ids suppressed, and export writes the rows back."""
import json

import pytest
import torch

from arch_zoo.cli import main
from tests.interop.padded_vocab import FAMILIES, padded_checkpoint

tf = pytest.importorskip("transformers")

PROMPTS = ["the cat sat on", "water is", "paris is the capital"]
NEW_TOKENS = 8


@pytest.fixture(scope="module", params=FAMILIES)
def imported(request, tmp_path_factory):
    """(the checkpoint, its run written by `arch-zoo import`, Hugging Face's model of it)."""
    base = tmp_path_factory.mktemp(request.param)
    padded = padded_checkpoint(request.param, base / "hf")
    assert main(["import", str(padded.dir), "--out", str(base / "run")]) == 0
    auto = tf.AutoModelForSeq2SeqLM if request.param == "t5" else tf.AutoModelForCausalLM
    return padded, base / "run", auto.from_pretrained(padded.dir).eval()


def _source_ids(tokenizer, text):
    """A prompt as the run's tokenizer encodes it; T5's post-processor appends </s> to a source."""
    return tokenizer.encode(text, add_special_tokens=True)


def _hugging_face(hf, padded, ids, **kwargs):
    """Hugging Face's own decoding of ``ids`` with every padded id suppressed: the reference."""
    start = {"decoder_start_token_id": padded.pad} if hf.config.is_encoder_decoder else {}
    out = hf.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                      max_new_tokens=NEW_TOKENS, eos_token_id=padded.eos, pad_token_id=padded.pad,
                      suppress_tokens=list(range(padded.tokens, padded.rows)), **start, **kwargs)
    tokens = out[0, 1:] if hf.config.is_encoder_decoder else out[0, len(ids):]
    tokens = tokens.tolist()
    return tokens[:tokens.index(padded.eos) + 1] if padded.eos in tokens else tokens


def test_the_run_keeps_every_row_and_the_tokenizer_its_size(imported):
    from arch_zoo import restore

    padded, run, hf = imported
    cfg, model, tokenizer = restore(run)
    assert padded.rows > padded.tokens
    assert (tokenizer.vocab_size, model.vocab_size, cfg.model.vocab_size) == (padded.tokens, padded.rows, padded.rows)
    batch = [_source_ids(tokenizer, text) for text in PROMPTS[:1] * 2]
    ids = torch.tensor(batch)
    with torch.no_grad():
        if cfg.model.kind == "encoder_decoder":
            dec = torch.tensor([[padded.pad, 5, 9, 2]] * 2)
            theirs, ours = hf(input_ids=ids, decoder_input_ids=dec).logits, model(ids, dec).logits
        else:
            theirs, ours = hf(input_ids=ids).logits, model(ids).logits
    assert ours.shape[-1] == theirs.shape[-1] == padded.rows
    scale = theirs.abs().max()
    torch.testing.assert_close(ours, theirs, atol=1e-5 * float(scale), rtol=1e-5)


def test_export_writes_every_row_back_and_the_tokenizer_as_it_was(imported, tmp_path):
    from safetensors.torch import load_file

    padded, run, _ = imported
    assert main(["export", str(run), "--to", "hf", "--out", str(tmp_path / "back")]) == 0
    theirs, ours = load_file(padded.dir / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors")
    assert set(theirs) == set(ours) and all(torch.equal(theirs[k], ours[k]) for k in theirs)
    config = json.loads((tmp_path / "back" / "config.json").read_text())
    assert config["vocab_size"] == padded.rows
    original = json.loads((padded.dir / "config.json").read_text())
    if "decoder_start_token_id" in original:  # T5 starts its decoder from <pad>, and so does the export
        assert config["decoder_start_token_id"] == original["decoder_start_token_id"]
        generation = json.loads((tmp_path / "back" / "generation_config.json").read_text())
        assert generation["decoder_start_token_id"] == original["decoder_start_token_id"]
    a, b = (tf.AutoTokenizer.from_pretrained(d) for d in (padded.dir, tmp_path / "back"))
    assert len(a) == len(b) == padded.tokens
    assert all(a.encode(text) == b.encode(text) for text in PROMPTS)


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_generate_chooses_what_hugging_face_chooses_with_the_padded_ids_suppressed(imported, strategy):
    from arch_zoo import restore
    from arch_zoo.generation import generate

    padded, run, hf = imported
    cfg, model, tokenizer = restore(run)
    beams = {"beams": 2} if strategy == "beam" else {}
    for text in PROMPTS:
        ids = _source_ids(tokenizer, text)
        with torch.no_grad():  # the padded rows hold the largest logits: keeping out of them is the test
            unrestricted = generate(model, [ids], max_new_tokens=1, decoder_start_token_id=padded.pad)
        assert unrestricted.best[0, 0] >= padded.tokens
        out = generate(model, [ids], strategy=strategy, max_new_tokens=NEW_TOKENS, eos_token_id=padded.eos,
                       pad_token_id=padded.pad, decoder_start_token_id=padded.pad, tokenizer_size=tokenizer.vocab_size,
                       **beams)
        extra = dict(num_beams=2, early_stopping="never", do_sample=False) if beams else dict(do_sample=False)
        assert out.to_lists()[0][0] == _hugging_face(hf, padded, ids, **extra), text


def test_sampling_never_draws_an_id_the_tokenizer_cannot_decode(imported):
    from arch_zoo import restore
    from arch_zoo.generation import generate

    padded, run, _ = imported
    _, model, tokenizer = restore(run)
    prompts = [_source_ids(tokenizer, text) for text in PROMPTS]
    out = generate(model, prompts, strategy="sample", max_new_tokens=24, seed=0, decoder_start_token_id=padded.pad,
                   tokenizer_size=tokenizer.vocab_size, return_logits=True)
    assert int(out.tokens.max()) < padded.tokens
    assert out.logits.shape[-1] == padded.rows  # the model still scores every row
    assert bool((out.logits[..., padded.tokens:].amax(-1) > out.logits[..., :padded.tokens].amax(-1)).all())


def test_a_prompt_is_encoded_as_hugging_faces_tokenizer_encodes_it(imported):
    """Issue: `arch-zoo generate` skipped the tokenizer's post-processor: T5's source lacked the </s>
    that `tokenizer(prompt)` appends and its checkpoints were trained with."""
    from arch_zoo import restore
    from arch_zoo.trained.restore import prompt_ids

    padded, run, _ = imported
    cfg, _, tokenizer = restore(run)
    theirs = tf.AutoTokenizer.from_pretrained(padded.dir)
    for text in PROMPTS:
        ids = prompt_ids(cfg, tokenizer, text)
        assert ids == theirs(text).input_ids, text
        assert (ids[-1] == padded.eos) == (cfg.model.kind == "encoder_decoder")  # only T5's template adds one


def test_arch_zoo_generate_prints_hugging_faces_greedy_text_over_the_tokenizer(imported, capsys):
    """T5's decoder starts from the checkpoint's decoder_start_token_id (<pad>), as in Hugging Face,
    from the prompt as ``tokenizer(prompt)`` encodes it (T5's with </s>, which changes the output)."""
    from arch_zoo import restore

    padded, run, hf = imported
    _, _, tokenizer = restore(run)
    capsys.readouterr()
    assert main(["generate", str(run), "--prompt", PROMPTS[0], "--max-new-tokens", str(NEW_TOKENS)]) == 0
    ids = tf.AutoTokenizer.from_pretrained(padded.dir)(PROMPTS[0]).input_ids
    expected = tokenizer.decode(_hugging_face(hf, padded, ids, do_sample=False))
    if hf.config.is_encoder_decoder:  # the </s> decides what is generated, so the test tells the two apart
        assert expected != tokenizer.decode(_hugging_face(hf, padded, ids[:-1], do_sample=False))
    assert expected.strip() and capsys.readouterr().out == expected + "\n"


def test_lm_evals_generate_until_decodes_what_hugging_face_chooses_over_the_tokenizer(imported):
    from lm_eval.api.instance import Instance
    from lm_eval.models.utils import postprocess_generated_text

    from arch_zoo.evaluation import ArchZooLM

    padded, run, hf = imported
    lm = ArchZooLM(run=str(run), device="cpu", batch_size=2)
    decoded, decode = [], lm.tok_decode
    lm.tok_decode = lambda tokens: decoded.append(list(tokens)) or decode(tokens)  # the ids it turned into text
    until = ["\n\n\n"]
    for prompt in PROMPTS:
        request = Instance("generate_until", {}, (prompt, {"until": until, "do_sample": False,
                                                           "max_gen_toks": NEW_TOKENS}), 0)
        text = lm.generate_until([request])[0]
        expected = _hugging_face(hf, padded._replace(pad=lm.encoding.decoder_start_id), lm.tok_encode(prompt),
                                 do_sample=False)
        assert decoded.pop() == expected and text == postprocess_generated_text(decode(expected), until, None)
        assert max(expected) < padded.tokens


def test_a_tokenizer_larger_than_the_embedding_is_refused_at_import_restore_and_generate(tmp_path):
    import yaml

    from arch_zoo import restore
    from arch_zoo.errors import ConfigError
    from arch_zoo.generation import generate
    from arch_zoo.interop.as_run import save_as_run
    from arch_zoo.models import build_model
    from tests.evaluation.helpers import tiny_run

    run = tiny_run(tmp_path / "run")
    cfg, _, tokenizer = restore(run)
    n = tokenizer.vocab_size
    small = build_model(cfg.model, n - 4)
    with pytest.raises(ConfigError, match=f"has {n} tokens but the model's embedding has {n - 4} rows"):
        save_as_run(small, tokenizer, tmp_path / "small")
    assert not (tmp_path / "small").exists()
    with pytest.raises(ConfigError, match=f"tokenizer_size: {n} is more than the model's {n - 4} vocabulary rows"):
        generate(small, [[1, 2]], tokenizer_size=n)
    written = yaml.safe_load((run / "config.yaml").read_text())
    written["model"]["vocab_size"] = n - 4
    (run / "config.yaml").write_text(yaml.safe_dump(written))
    with pytest.raises(ConfigError, match=f"model.vocab_size {n - 4}, fewer than the {n} tokens"):
        restore(run)


def test_training_from_an_imported_padded_run_keeps_every_row_and_exports(tmp_path, capsys):
    """Issue: training from an imported run with padded rows was refused (model.vocab_size 384, the
    tokenizer's 300). It trains as Hugging Face trains it, the softmax over every row, none a target;
    the run keeps the padded vocab_size, so its export is the checkpoint's shape and loads alone."""
    from arch_zoo import restore
    from tests.evaluation.helpers import TEXT
    from tests.interop.family_checks import assert_export_loads_alone
    from tests.interop.references import padded_batch

    padded = padded_checkpoint("gpt_neox", tmp_path / "hf")
    assert main(["import", str(padded.dir), "--out", str(tmp_path / "run")]) == 0
    (tmp_path / "corpus.txt").write_text("\n".join(TEXT * 4))
    assert main(["train", str(tmp_path / "run" / "config.yaml"), "--out", str(tmp_path / "tuned"), "--quiet",
                 "task.name=char_lm", f"task.files=[{tmp_path / 'corpus.txt'}]", "task.seq_len=32",
                 "task.tokenizer.name=pretrained", f"task.tokenizer.path={padded.dir}", "train.max_steps=2",
                 "train.val_every=2", "train.val_batches=1", "train.batch_size=2", "train.progress_bar=false"]) == 0
    assert "status: completed" in capsys.readouterr().out
    cfg, model, tokenizer = restore(tmp_path / "tuned")
    assert (cfg.model.vocab_size, model.vocab_size, tokenizer.vocab_size) == (padded.rows, padded.rows, padded.tokens)
    assert main(["export", str(tmp_path / "tuned"), "--to", "hf", "--out", str(tmp_path / "back")]) == 0
    assert json.loads((tmp_path / "back" / "config.json").read_text())["vocab_size"] == padded.rows
    job = {"dir": str(tmp_path / "back"), "auto_class": "AutoModelForCausalLM", "remote": False,
           "prompts": [tokenizer.encode(PROMPTS[0])], "new_tokens": 4,
           **{side: padded_batch([7, 12, 3], 12, side, low=3) for side in ("right", "left")}}
    assert_export_loads_alone(tmp_path, model.eval(), job)
