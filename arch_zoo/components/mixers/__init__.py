"""Token mixers (``model.mixer``), one file each; importing this package registers the built-ins."""
from . import (attention, differential, gated_deltanet, gru, latent_attention, linear_attention, lstm,  # noqa: F401
               mamba2, mlstm, rg_lru, short_conv)
from .base import MIXERS, Mixer, MixerInputs  # noqa: F401
