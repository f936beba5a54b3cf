"""Issue 41 §5: the tokens and prefix of a run trained here (its tokenizer names no Hugging Face special
tokens): EOS before an empty context or a rolling window, as its training documents followed an EOS,
and nothing added to a text; ``add_bos_token`` and ``prefix_token_id`` change that as for ``hf``."""
import pytest

pytest.importorskip("lm_eval")

from tests.evaluation.helpers import bos_tokenizer, tiny_run  # noqa: E402


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Its tokenizer has <s> and </s> (BOS != EOS) and a post-processor that adds <s>: a run trained
    here with it never saw that <s>, so the rule must not add it."""
    return tiny_run(tmp_path_factory.mktemp("encoding") / "run", tokenizer=bos_tokenizer)


def test_a_run_trained_here_starts_with_eos_and_adds_nothing(run):
    from lm_eval.api.instance import Instance

    from arch_zoo import restore
    from arch_zoo.evaluation import ArchZooLM

    tok = restore(run).tokenizer
    lm = ArchZooLM(run=str(run), device="cpu")
    assert tok.declared is None and lm.prefix_token_id == tok.eos_id != tok.bos_id
    assert lm.tok_encode("the cat") == tok.encode("the cat")
    with_bos = ArchZooLM(run=str(run), device="cpu", add_bos_token="True", prefix_token_id=str(tok.bos_id))
    assert with_bos.prefix_token_id == tok.bos_id
    assert with_bos.tok_encode("the cat") == [tok.bos_id] + tok.encode("the cat")
    assert with_bos.tok_encode("the cat", add_special_tokens=False) == tok.encode("the cat")
    # an empty context is the prefix alone: its score is the continuation's after that one token
    request = [Instance("loglikelihood", {}, ("", "the cat"), 0)]
    direct = lm._score([([tok.eos_id], tok.encode("the cat"))])
    assert lm.loglikelihood(request)[0][0] == pytest.approx(direct[0][0], abs=1e-6)
    assert with_bos.loglikelihood(request)[0][0] != pytest.approx(direct[0][0], abs=1e-3)


@pytest.mark.parametrize("args, message", [({"prefix_token_id": "x"}, "expected a token id"),
                                           ({"prefix_token_id": 10**6}, "outside the vocabulary"),
                                           ({"add_bos_token": "maybe"}, "expected true or false")])
def test_bad_model_arguments_name_the_argument(run, args, message):
    from arch_zoo.errors import ConfigError
    from arch_zoo.evaluation import ArchZooLM

    with pytest.raises(ConfigError, match=message) as info:
        ArchZooLM(run=str(run), device="cpu", **args)
    assert next(iter(args)) in str(info.value)
