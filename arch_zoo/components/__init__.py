"""Swappable Transformer parts, one file and one registry per family."""
