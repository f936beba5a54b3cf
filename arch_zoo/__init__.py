"""arch_zoo: controlled Transformer architecture comparisons."""
__version__ = "0.1.0"
