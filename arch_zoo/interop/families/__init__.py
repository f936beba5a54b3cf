"""One module per Hugging Face family; importing this package registers them all (``family.FAMILIES``).

Each module holds everything its family needs: ``config`` (HF config.json -> arch_zoo model mapping),
``weights`` (arch_zoo tensor <- HF tensor; export runs it backwards), ``write`` (arch_zoo ModelConfig ->
HF config.json) and ``FAMILY = register(HFFamily(...))``. The import order below is the order export
tries the families of a kind: the first whose importer gives the model back is written (a Llama
before the descendants that also express it)."""
from . import gpt2, llama, mistral, qwen3, mixtral, gemma2, gpt_neox, bloom  # noqa: F401  (attention-only decoders)
from . import mamba2, qwen3_next, lfm2, bamba, diffllama, deepseek_v3, gpt_oss  # noqa: F401  (other mixers, MoE)
from . import kimi_linear  # noqa: F401  (KDA + MLA hybrid, MoE)
from . import minimax  # noqa: F401  (lightning attention + softmax attention, MoE)
from . import recurrent_gemma  # noqa: F401  (Griffin: RG-LRU and local attention)
from . import falcon_h1  # noqa: F401  (attention beside Mamba-2 in every layer)
from . import xlstm  # noqa: F401  (xLSTM-7B: mLSTM blocks)
from . import bert, t5  # noqa: F401  (an encoder, an encoder-decoder)
