"""Tokenizers and the task registry: everything between raw text and padded id tensors."""
