"""torch.compile traces a whole model as one graph (fullgraph=True fails on any graph break), so the
hand-written autograd pieces (RoPE, gated FFNs) do not cost compiled users their fusion."""
import pytest
import torch

from arch_zoo.models import build_model


@pytest.mark.parametrize("ffn", ["swiglu", "geglu"])
def test_a_llama_style_decoder_compiles_as_one_graph_and_matches_eager(ffn):
    torch.manual_seed(0)
    model = build_model(dict(kind="decoder", d_model=32, n_layers=2, n_heads=2, d_ff=64, position="rope", ffn=ffn,
                             norm="rmsnorm", bias=False, max_seq_len=16), 50)
    ids = torch.randint(0, 50, (2, 16))
    eager = model(ids).logits
    eager.pow(2).mean().backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    got = compiled(ids).logits
    got.pow(2).mean().backward()
    torch.testing.assert_close(got, eager, rtol=1e-5, atol=1e-6)
    for p, w in zip(model.parameters(), want):
        torch.testing.assert_close(p.grad, w, rtol=1e-4, atol=1e-6)
