"""Weights from reference implementations into arch_zoo models.

* ``from_hf(model)``: an in-memory Hugging Face model of a supported ``model_type`` (``ARCHITECTURES``):
  GPT-2, BERT, Llama, T5 (1.0 and 1.1), Qwen3, Mistral, Mixtral, GPT-NeoX (Pythia), BLOOM and
  Gemma 2 (local/global alternation as per-layer attention, ``model.layers``);
* ``load_hf_checkpoint(path)``: a local Hugging Face checkpoint directory (config.json +
  model.safetensors), read with safetensors alone: no transformers, no network;
* ``from_torch_transformer(module, vocab_size)``: torch.nn.Transformer / nn.TransformerEncoder;

and back: ``to_hf(model, tokenizer=None)`` (a transformers model, for a config a family expresses)
and ``save_hf(model, tokenizer, out)`` (a directory ``from_pretrained`` loads, as that family's class
or as arch_zoo remote code), ``import_hf(path, out)`` (a checkpoint directory as a run).

Each derives the arch_zoo config from the reference's, or loads into a given one
(``config="preset:gpt2"``), and checks every tensor: a checkpoint that does not fit raises
``CheckpointError`` naming the first tensor that does not (``CheckpointMismatchError`` with both
shapes when only the shape is wrong). Importing this package needs torch alone.
"""
from .checkpoint import CheckpointError, CheckpointMismatchError, load_checked, read_checkpoint_dir
from .hf import convert, from_hf, load_hf_checkpoint, model_config_from_hf
from .family import ARCHITECTURES
from .torch_nn import from_torch_transformer, torch_transformer_config


def to_hf(model, tokenizer=None):
    """The transformers model equal to an arch_zoo model (``export_hf.to_hf``; needs transformers)."""
    from .export_hf import to_hf as convert_back

    return convert_back(model, tokenizer)


def save_hf(model, tokenizer, out, **options):
    """Write a Hugging Face model directory (``export_dir.save_hf``; needs transformers)."""
    from .export_dir import save_hf as write

    return write(model, tokenizer, out, **options)


def import_hf(path, out, **options):
    """A local Hugging Face checkpoint directory as a run directory (``as_run.import_hf``)."""
    from .as_run import import_hf as write

    return write(path, out, **options)

__all__ = ["ARCHITECTURES", "CheckpointError", "CheckpointMismatchError", "convert", "from_hf",
           "from_torch_transformer", "load_checked", "load_hf_checkpoint", "model_config_from_hf",
           "import_hf", "read_checkpoint_dir", "save_hf", "to_hf", "torch_transformer_config"]
