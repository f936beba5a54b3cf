"""Decoding for any decoder or encoder-decoder model the registry builds: greedy, sampling
(temperature, top-k, top-p) and beam search, cached or not. Needs torch alone."""
from .api import STRATEGIES, GenerationOutput, generate
from .prompts import left_pad
from .sampling import Sampler, sample_logits, top_k_filter, top_p_filter

__all__ = ["STRATEGIES", "GenerationOutput", "generate", "left_pad", "Sampler", "sample_logits",
           "top_k_filter", "top_p_filter"]
