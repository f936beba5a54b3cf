"""The modelling file of an arch_zoo remote-code directory (copied there as ``modeling_arch_zoo.py``).

``AutoModelFor*.from_pretrained(DIR, trust_remote_code=True)`` runs it where arch_zoo is installed:
it builds the arch_zoo model from the config's ``arch_zoo_model`` (after importing the plugin files
copied beside it, each checked against its recorded sha256) and wraps it as a transformers model,
so ``generate`` and lm_eval's ``hf`` model work. Decoding re-reads the whole sequence each step (no
transformers cache): exact, and fast enough for the small models arch_zoo compares."""
import hashlib
import importlib.util
import os
import sys

import torch
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput, MaskedLMOutput, Seq2SeqLMOutput


class ArchZooConfig(PretrainedConfig):
    model_type = "arch_zoo"

    def __init__(self, arch_zoo_model=None, arch_zoo_plugins=None, **kwargs):
        self.arch_zoo_model = arch_zoo_model or {}
        self.arch_zoo_plugins = arch_zoo_plugins or []
        super().__init__(**kwargs)


def _load_plugins(config):
    # transformers runs a copy of this file from its modules cache: the plugins are read from the
    # directory the model was loaded from
    here = config.name_or_path if os.path.isdir(config.name_or_path or "") else os.path.dirname(__file__)
    for plugin in config.arch_zoo_plugins:
        if plugin["module"] in sys.modules:  # this process imported the run's plugin already
            continue
        path = os.path.join(here, plugin["file"])
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        if digest != plugin["sha256"]:
            raise ValueError(f"{path}: sha256 {digest} differs from the exported plugin's {plugin['sha256']}")
        spec = importlib.util.spec_from_file_location(plugin["module"], path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[plugin["module"]] = module  # dataclasses look their module up by name
        spec.loader.exec_module(module)


class _ArchZooModel(PreTrainedModel):
    config_class = ArchZooConfig
    base_model_prefix = "model"
    _supports_cache_class = False

    def __init__(self, config):
        super().__init__(config)
        from arch_zoo.models import build_model

        _load_plugins(config)
        self.model = build_model(config.arch_zoo_model, config.vocab_size)
        # names that share a tensor (a tied output projection): saved once, tied again on load
        seen, tied = {}, {}
        for name, p in self.model.named_parameters(remove_duplicate=False):
            if id(p) in seen:
                tied[f"model.{name}"] = f"model.{seen[id(p)]}"
            else:
                seen[id(p)] = name
        self._tied_weights_keys = tied
        # transformers ties (and counts as loaded) the keys above only where the config says so
        config.tie_word_embeddings = bool(tied)
        self.post_init()

    def _init_weights(self, module):
        pass  # arch_zoo initialised the model; the checkpoint overwrites it anyway

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """transformers builds the model on the meta device and loads only what was saved: the
        buffers arch_zoo computes (rotary tables, ALiBi slopes) are taken from a model built for real."""
        model = super().from_pretrained(*args, **kwargs)
        from arch_zoo.models import build_model

        fresh = build_model(model.config.arch_zoo_model, model.config.vocab_size)
        saved = set(model.model.state_dict())
        buffers = dict(fresh.named_buffers())
        with torch.no_grad():
            for name, buffer in list(model.model.named_buffers()):
                if name not in saved and name in buffers:
                    owner, _, leaf = name.rpartition(".")
                    module = model.model.get_submodule(owner) if owner else model.model
                    module._buffers[leaf] = buffers[name].to(buffer.device if buffer.device.type != "meta" else "cpu")
            for name, source in model._tied_weights_keys.items():  # one tensor again, as arch_zoo built it
                owner, _, leaf = name.removeprefix("model.").rpartition(".")
                setattr(model.model.get_submodule(owner), leaf, model.model.get_parameter(source.removeprefix("model.")))
        return model

    def get_input_embeddings(self):
        return self.model.embed


class ArchZooForCausalLM(_ArchZooModel, GenerationMixin):
    def forward(self, input_ids=None, attention_mask=None, labels=None, **kwargs):
        logits = self.model(input_ids, attention_mask).logits
        loss = None
        if labels is not None:
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(),
                                                     ignore_index=-100)
        return CausalLMOutput(loss=loss, logits=logits)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        return {"input_ids": input_ids, "attention_mask": attention_mask}


class ArchZooForMaskedLM(_ArchZooModel):
    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, **kwargs):
        return MaskedLMOutput(logits=self.model(input_ids, attention_mask).logits)


class _Encoder(torch.nn.Module):
    """What ``generate`` runs once over the source: arch_zoo's encoder stack."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids=None, attention_mask=None, return_dict=True, **kwargs):
        from transformers.modeling_outputs import BaseModelOutput

        return BaseModelOutput(last_hidden_state=self.model.encode(input_ids, attention_mask))


class ArchZooForSeq2SeqLM(_ArchZooModel, GenerationMixin):
    def get_encoder(self):
        return _Encoder(self.model)

    def forward(self, input_ids=None, attention_mask=None, decoder_input_ids=None, decoder_attention_mask=None,
                encoder_outputs=None, **kwargs):
        if encoder_outputs is None:
            memory = self.model.encode(input_ids, attention_mask)
        else:
            memory = encoder_outputs[0] if isinstance(encoder_outputs, (tuple, list)) else encoder_outputs.last_hidden_state
        logits = self.model.decode(decoder_input_ids, memory, attention_mask, decoder_attention_mask).logits
        return Seq2SeqLMOutput(logits=logits)

    def prepare_inputs_for_generation(self, decoder_input_ids, attention_mask=None, encoder_outputs=None, **kwargs):
        return {"attention_mask": attention_mask, "decoder_input_ids": decoder_input_ids,
                "encoder_outputs": encoder_outputs}
