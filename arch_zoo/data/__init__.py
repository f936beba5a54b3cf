"""Tokenizers and the task registry: everything between raw text and padded id tensors."""
from . import pretrained  # noqa: F401  (registers the 'pretrained' tokenizer beside char, byte, bpe)
