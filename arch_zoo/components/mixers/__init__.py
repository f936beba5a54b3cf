"""Token mixers (``model.mixer``), one file each; importing this package registers the built-ins."""
from . import (attention, differential, gated_deltanet, gated_deltaproduct, gru, kda, latent_attention,  # noqa: F401
               lightning, linear_attention, lstm, mamba2, mlstm, parallel, rg_lru, rwkv7, short_conv)
from .base import MIXERS, Mixer, MixerInputs  # noqa: F401
