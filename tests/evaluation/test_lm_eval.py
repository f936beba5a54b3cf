"""Issue 30 §2: arch_zoo runs in lm-evaluation-harness, checked against lm_eval's own ``hf`` model.

A tiny random GPT-2 and a tiny random T5 (transformers, from configs) are saved as Hugging Face
checkpoints and imported into arch_zoo run directories; the real lm_eval then runs the tasks these
tests ship (multiple choice, generation, rolling perplexity; JSON Lines data, no hub) with both model
classes (``hf`` picks its causal backend for GPT-2 and its seq2seq backend for T5). Every per-example
response must agree: the loglikelihoods (and is-greedy flags) within float tolerance, the
generations exactly (for T5: up to ``max_gen_toks`` new tokens, where ``hf`` decodes a seq2seq model
to ``max_length`` = context length + ``max_gen_toks``)."""
import math

import pytest

pytest.importorskip("lm_eval")

from tests.evaluation.helpers import import_run, in_task_dir, tiny_gpt2, tiny_llama, tiny_t5, tiny_t5_eos  # noqa: E402

TASKS = ["zoo_choice", "zoo_gen", "zoo_text"]
MAX_LENGTH = 24  # below the documents' lengths: rolling windows, and contexts cut from the left


# GPT-2's one <|endoftext|> is its BOS and EOS and its tokenizer adds nothing; the Llama's tokenizer puts
# <s> before every text and its EOS </s> differs: hf's defaults (BOS prefix, the tokenizer's own special
# tokens) then decide every score, and the imported run must follow them
# T5's own tokenizers append </s> and name no BOS, and its decoder starts from <pad>
BUILDERS = {"gpt2": tiny_gpt2, "llama": tiny_llama, "t5": tiny_t5, "t5_eos": tiny_t5_eos}


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def checkpoints(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"lm_eval_{request.param}")
    hf_dir = BUILDERS[request.param](root / "hf")
    return hf_dir, import_run(hf_dir, root / "run")


def _samples(model, task_dir):
    import lm_eval
    from lm_eval.tasks import TaskManager

    out = lm_eval.simple_evaluate(model=model, tasks=TASKS, task_manager=TaskManager(
        include_path=str(task_dir), include_defaults=False), log_samples=True, bootstrap_iters=0,
        verbosity="ERROR")
    return out, {t: sorted(out["samples"][t], key=lambda s: s["doc_id"]) for t in TASKS}


def test_per_example_loglikelihoods_and_generations_equal_lm_evals_hf_model(checkpoints):
    pytest.importorskip("accelerate", reason="lm_eval's hf model needs accelerate (the test extra installs it)")
    from lm_eval.models.huggingface import HFLM

    from arch_zoo import restore
    from arch_zoo.evaluation import ArchZooLM

    hf_dir, run = checkpoints
    seq2seq = restore(run).config.model.kind == "encoder_decoder"
    their_lm = HFLM(pretrained=str(hf_dir), device="cpu", batch_size=4, dtype="float32", max_length=MAX_LENGTH)
    our_lm = ArchZooLM(run=str(run), device="cpu", batch_size=4, max_length=MAX_LENGTH)
    assert our_lm.backend == their_lm.backend == ("seq2seq" if seq2seq else "causal")
    with in_task_dir() as task_dir:
        theirs, their_samples = _samples(their_lm, task_dir)
        ours, our_samples = _samples(our_lm, task_dir)
    tok = restore(run).tokenizer
    cut = 0
    for task in TASKS:
        assert [s["doc_id"] for s in our_samples[task]] == [s["doc_id"] for s in their_samples[task]]
        for mine, ref in zip(our_samples[task], their_samples[task]):
            assert len(mine["resps"]) == len(ref["resps"]) > 0
            for a, b in zip(mine["resps"], ref["resps"]):
                a, b = a[0], b[0]  # one response per request (no repeats)
                if task == "zoo_gen":
                    assert isinstance(a, str) and (b.startswith(a) if seq2seq else a == b)
                elif task == "zoo_choice":  # (loglikelihood, is_greedy)
                    assert a[0] == pytest.approx(b[0], abs=1e-4, rel=1e-5) and a[1] == b[1]
                else:  # a rolling loglikelihood
                    assert a == pytest.approx(b, abs=1e-4, rel=1e-5)
            longest = len(tok.encode(mine["doc"].get("text") or mine["doc"].get("context") or ""))
            cut += longest > MAX_LENGTH
    assert cut >= 3  # documents longer than the window (rolling windows) and a context cut from the left
    for task in TASKS if not seq2seq else ["zoo_choice", "zoo_text"]:  # and the metrics lm_eval computes from them
        for key, value in theirs["results"][task].items():
            if isinstance(value, float) and "stderr" not in key:
                assert ours["results"][task][key] == pytest.approx(value, rel=1e-4), (task, key)


def test_rolling_loglikelihood_is_the_full_forward_over_the_document(checkpoints):
    """Independent of lm_eval's windows: a document that fits is scored by one uncached forward
    pass after the prefix token (for an encoder-decoder: that token as the source, the document
    as the target), and the model class must give that sum. The prefix and the document's tokens are
    hf's: the tokenizer's BOS (EOS when it names none), and what the tokenizer adds by itself."""
    import torch
    from lm_eval.api.instance import Instance

    from arch_zoo import restore
    from arch_zoo.evaluation import ArchZooLM

    _, run = checkpoints
    cfg, model, tok = restore(run)
    lm = ArchZooLM(run=str(run), device="cpu", batch_size=2)
    docs = ["the cat sat on the mat.", "water is wet. two plus two is four."]
    got = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (d,), i) for i, d in enumerate(docs)])
    for doc, value in zip(docs, got):
        bos = tok.declared.get("bos_token")
        ids = [tok.token_id(bos) if bos else tok.eos_id] + tok.encode(doc, add_special_tokens=True)
        with torch.no_grad():
            if cfg.model.kind == "decoder":
                logp = model(torch.tensor([ids])).logits[0, :-1].log_softmax(-1)
            else:  # the window's one-token context is the source; the decoder starts from its start token
                start = tok.declared.get("decoder_start_token")  # the checkpoint's (T5: <pad>), else BOS
                start_id = tok.token_id(start) if start is not None else tok.bos_id
                logp = model(torch.tensor([ids[:1]]), torch.tensor([[start_id] + ids[1:-1]])).logits[0].log_softmax(-1)
        expected = float(logp.gather(-1, torch.tensor(ids[1:]).unsqueeze(-1)).sum())
        assert value == pytest.approx(expected, abs=1e-4)
        assert math.isfinite(value) and value < 0


def test_tokens_and_prefix_are_hf_models_at_its_defaults(checkpoints):
    """What decides every score, compared with lm_eval's own ``hf`` model on the same directory: the
    prefix of empty contexts and rolling windows, the tokens of a text (a text that starts with the
    prefix gets nothing added), and what an empty context's continuation becomes."""
    pytest.importorskip("accelerate", reason="lm_eval's hf model needs accelerate (the test extra installs it)")
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    from arch_zoo.evaluation import ArchZooLM

    hf_dir, run = checkpoints
    their_lm = HFLM(pretrained=str(hf_dir), device="cpu", batch_size=4, dtype="float32", max_length=MAX_LENGTH)
    our_lm = ArchZooLM(run=str(run), device="cpu", batch_size=4, max_length=MAX_LENGTH)
    assert our_lm.prefix_token_id == their_lm.prefix_token_id
    assert our_lm.eot_token_id == their_lm.eot_token_id
    prefix = their_lm.tokenizer.decode(their_lm.prefix_token_id)
    for text in ["the cat sat", " water is wet", "", prefix + "the sun"]:
        for add in (None, False, True):
            assert our_lm.tok_encode(text, add_special_tokens=add) == their_lm.tok_encode(text, add_special_tokens=add)
    requests = [Instance("loglikelihood", {}, (ctx, cont), i)
                for i, (ctx, cont) in enumerate([("", "the cat"), ("the cat", " sat"), ("", " water is")])]
    for a, b in zip(our_lm.loglikelihood(requests), their_lm.loglikelihood(requests)):
        assert a[0] == pytest.approx(b[0], abs=1e-4) and a[1] == b[1]


def test_a_bos_adding_tokenizer_changes_the_scores_the_defaults_must_match(tmp_path):
    """The Llama checkpoint's scores under arch_zoo's own rule (EOS prefix, nothing added) differ from
    hf's by far more than the tolerance, so the equality above is a test of the defaults."""
    from lm_eval.api.instance import Instance

    from arch_zoo.evaluation import ArchZooLM

    run = import_run(tiny_llama(tmp_path / "hf"), tmp_path / "run")
    default = ArchZooLM(run=str(run), device="cpu", batch_size=4)
    own = ArchZooLM(run=str(run), device="cpu", batch_size=4, add_bos_token=False,
                    prefix_token_id=default.eot_token_id)
    assert default.prefix_token_id != default.eot_token_id
    docs = [Instance("loglikelihood_rolling", {}, ("the cat sat on the mat",), 0)]
    assert abs(default.loglikelihood_rolling(docs)[0] - own.loglikelihood_rolling(docs)[0]) > 0.1
