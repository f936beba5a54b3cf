"""YaRN positions (``position: yarn``): the frequencies and attention factor of Hugging Face's
``rope_type: yarn`` (its own function, across truncate, mscale and partial rotary), the rotation of q
and k against a float64 computation from the paper's formulas, and bad options named by key."""
import math

import pytest
import torch

from arch_zoo.components.positions import PositionContext
from arch_zoo.components.yarn import Yarn, YarnOptions
from arch_zoo.config.loading import model_config
from arch_zoo.errors import ConfigError

tf = pytest.importorskip("transformers")


def hf_yarn(head_dim, rope):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    max_len = int(rope["factor"] * rope["original_max_position_embeddings"])  # the context YaRN stretches to
    config = tf.GptOssConfig(head_dim=head_dim, max_position_embeddings=max_len,
                             rope_parameters={"rope_type": "yarn", **rope})
    return ROPE_INIT_FUNCTIONS["yarn"](config)


CASES = [  # (head_dim, HF rope_parameters, our options)
    (64, dict(rope_theta=150000.0, factor=32.0, beta_fast=32.0, beta_slow=1.0, truncate=False,
              original_max_position_embeddings=4096), dict(base=150000.0, factor=32.0, truncate=False)),  # gpt-oss
    (64, dict(rope_theta=10000.0, factor=8.0, original_max_position_embeddings=2048),
     dict(base=10000.0, factor=8.0, original_max_seq_len=2048)),  # truncate and betas at HF's defaults
    (32, dict(rope_theta=10000.0, factor=40.0, mscale=1.0, mscale_all_dim=0.707, beta_fast=16.0, beta_slow=2.0,
              original_max_position_embeddings=512),
     dict(factor=40.0, mscale=1.0, mscale_all_dim=0.707, beta_fast=16.0, beta_slow=2.0, original_max_seq_len=512)),
    (16, dict(rope_theta=10000.0, factor=4.0, attention_factor=0.9, partial_rotary_factor=0.5,
              original_max_position_embeddings=64),
     dict(factor=4.0, attention_factor=0.9, fraction=0.5, original_max_seq_len=64)),
]


def yarn(head_dim, **options):
    return Yarn(YarnOptions(**options), PositionContext(128, 2, head_dim, 8192, True))


@pytest.mark.parametrize("head_dim,theirs,ours", CASES)
def test_frequencies_and_attention_factor_equal_hfs(head_dim, theirs, ours):
    inv_freq, factor = hf_yarn(head_dim, theirs)
    ours = yarn(head_dim, **ours)
    torch.testing.assert_close(ours.inv_freq, inv_freq, rtol=1e-6, atol=0)
    assert ours.attention_factor == pytest.approx(factor, rel=1e-12)
    rope = 1.0 / theirs["rope_theta"] ** (torch.arange(0, ours.rot, 2, dtype=torch.float64) / ours.rot)
    assert (ours.inv_freq / rope).min() < 0.99 / theirs["factor"] ** 0.5  # some pairs interpolated (RoPE's / factor)


def test_the_gpt_oss_ramp_keeps_high_frequencies_and_divides_low_ones():
    """By hand for gpt-oss (head_dim 64, base 150000, 4096 positions, betas 32 and 1, no truncation):
    the ramp runs from dim 64 ln(4096 / 64 pi) / (2 ln 150000) to 64 ln(4096 / 2 pi) / (2 ln 150000)."""
    m = yarn(64, base=150000.0, factor=32.0, truncate=False)
    low = 64 * math.log(4096 / (32 * 2 * math.pi)) / (2 * math.log(150000))
    high = 64 * math.log(4096 / (2 * math.pi)) / (2 * math.log(150000))
    rope = [150000.0 ** (-2 * i / 64) for i in range(32)]
    for i in range(32):
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)
        assert m.inv_freq[i].item() == pytest.approx(rope[i] * (1 - ramp) + rope[i] / 32 * ramp, rel=1e-6)
    assert 0 < low < 9 < 16 < high < 18  # both ends kept and divided pairs exist
    assert m.attention_factor == pytest.approx(0.1 * math.log(32) + 1)


def test_rotation_equals_a_float64_rotation_by_the_scaled_angles():
    m = yarn(16, factor=4.0, original_max_seq_len=64)
    q, k = torch.randn(2, 3, 5, 16), torch.randn(2, 1, 7, 16)
    q_pos, k_pos = torch.tensor([[3, 4, 5, 6, 7]]), torch.arange(7)[None] * 3
    rq, rk = m.rotate(q, k, q_pos, k_pos)

    def by_hand(x, pos):
        angles = pos[0].double()[:, None] * m.inv_freq.double()  # (L, 8)
        a, b = x.double()[..., :8], x.double()[..., 8:]
        cos, sin = angles.cos() * m.attention_factor, angles.sin() * m.attention_factor
        return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)

    torch.testing.assert_close(rq.double(), by_hand(q, q_pos), atol=1e-5, rtol=0)
    torch.testing.assert_close(rk.double(), by_hand(k, k_pos), atol=1e-5, rtol=0)
    # q.k depends on the distance only, scaled by the attention factor squared
    one, two = m.rotate(q[:, :1, :1], k[:, :, :1], torch.tensor([[9]]), torch.tensor([[4]]))
    three, four = m.rotate(q[:, :1, :1], k[:, :, :1], torch.tensor([[25]]), torch.tensor([[20]]))
    torch.testing.assert_close((one * two).sum(-1), (three * four).sum(-1), atol=1e-4, rtol=0)
    plain = (q[:, :1, :1] * k[:, :, :1]).sum(-1)
    same = m.rotate(q[:, :1, :1], k[:, :, :1], torch.tensor([[6]]), torch.tensor([[6]]))
    torch.testing.assert_close((same[0] * same[1]).sum(-1), plain * m.attention_factor ** 2, atol=1e-5, rtol=0)


@pytest.mark.parametrize("options,key,message", [
    ({"factor": 0.5}, "model.position.factor", "must be >= 1"),
    ({"original_max_seq_len": 0}, "model.position.original_max_seq_len", "must be positive"),
    ({"beta_slow": -1.0}, "model.position.beta_slow", "must be positive"),
    ({"fraction": 0.1}, "model.position", "even, non-zero rotated dimension"),
])
def test_bad_options_name_their_key(options, key, message):
    with pytest.raises(ConfigError, match=message) as info:
        model_config({"kind": "decoder", "d_model": 16, "n_heads": 2, "position": {"name": "yarn", **options}})
    assert info.value.key == key
