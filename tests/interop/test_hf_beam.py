"""Beam search finds what Hugging Face's beam search finds, on the same (random) weights.

HF's ``early_stopping="never"`` is arch_zoo's rule (a prompt is done once no running beam can beat
the worst finished one, its best possible length taken as the longest allowed); the length penalty
divides by the generated length, EOS included, in both."""
import pytest
import torch

from arch_zoo.generation import generate
from arch_zoo.interop import from_hf
from tests.interop.references import VOCAB, hf_reference

pytest.importorskip("transformers")

STEPS = 8
PROMPTS = 8


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_beam_search_with_several_eos_ids_equals_hugging_face(name):
    """Several EOS ids, 2 beams, length_penalty 3. Each prompt's EOS ids are the three tokens the
    model ranks highest at the first step, so more of the 2 * beams best candidates end in EOS than
    there are beams: a search that keeps only 2 * beams candidates then loses running beams and
    returns worse hypotheses than HF, which keeps (1 + n_eos) * beams."""
    ref = hf_reference(name)
    model = from_hf(ref, config=f"preset:{name}-tiny")
    for seed in range(PROMPTS):
        ids = torch.randint(6, VOCAB, (1, 5), generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            eos = ref(ids).logits[0, -1].topk(3).indices.tolist()
        kwargs = dict(max_new_tokens=STEPS, eos_token_id=eos, pad_token_id=0, length_penalty=3.0)
        expected = ref.generate(ids, attention_mask=torch.ones_like(ids), num_beams=2, num_return_sequences=2,
                                early_stopping="never", do_sample=False, output_scores=True,
                                return_dict_in_generate=True, **kwargs)
        out = generate(model, ids.tolist(), strategy="beam", beams=2, n_best=2, **kwargs)
        for hyp, tokens in zip(out.to_lists()[0], expected.sequences[:, ids.shape[1]:].tolist()):
            ended = next((i + 1 for i, t in enumerate(tokens) if t in eos), len(tokens))
            assert hyp == tokens[:ended], f"prompt {seed}"
        torch.testing.assert_close(out.scores[0], expected.sequences_scores, atol=1e-5, rtol=0)
