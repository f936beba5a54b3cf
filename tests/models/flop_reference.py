"""An independent count of a forward's FLOPs: torch.utils.flop_counter.FlopCounterMode over the real
call. The counter counts every key of an attention's score and value products; a causal
self-attention's query sees only the keys before it, so those products are scaled to the share of a
lower-triangular mask of ones (counted, not derived). Models must use the explicit attention kernel:
the counter does not see sdpa's CPU kernel."""
import torch
from torch.utils.flop_counter import FlopCounterMode

MATMULS = ("aten.mm", "aten.addmm")  # the linear layers; the rest (bmm) is attention's products


def measured_forward_flops(model, **inputs) -> float:
    assert model.config.attention_kernel.name == "explicit"
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(**inputs)
    by_module = {name: {str(op): n for op, n in ops.items()} for name, ops in counter.get_flop_counts().items()}
    total = float(counter.get_total_flops())
    stack = getattr(model, "decoder", None)
    if stack is None:
        return total
    length = (inputs.get("decoder_input_ids") if "decoder_input_ids" in inputs else inputs["input_ids"]).shape[1]
    visible = float(torch.tril(torch.ones(length, length)).sum()) / length ** 2
    for i in range(len(stack.layers)):
        ops = by_module[f"{type(model).__name__}.decoder.layers.{i}.mixer.sublayer"]
        products = sum(n for op, n in ops.items() if op not in MATMULS)
        assert products > 0, ops
        total -= products * (1 - visible)
    return total
