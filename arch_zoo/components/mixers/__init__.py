"""Token mixers (``model.mixer``), one file each; importing this package registers the built-ins."""
from . import attention, differential, gated_deltanet, gru, latent_attention, linear_attention, lstm, mamba2  # noqa: F401
from .base import MIXERS, Mixer, MixerInputs  # noqa: F401
