"""Issue 55 §3: a preset of a published model carries that model's vocabulary size, and ``describe``
counts with it where no task, run or --vocab-size gives one (deepseek-v3: 671,026,404,352 parameters,
not 669,631,798,272 at an assumed 32,000). A run never takes it: its vocabulary is its task's
tokenizer's, whatever preset the model started from."""
import pytest

from arch_zoo.cli import main
from arch_zoo.config.loading import preset_names, published_vocab
from arch_zoo.experiment import load
from tests.test_presets import REFERENCE_SIZES

# every preset of a published model (the others are test sizes or papers without a released checkpoint)
PUBLISHED = {"bamba-9b": 128256, "bert": 30522, "bloom": 250880, "deepseek-v3": 129280, "falcon-h1-500m": 32784, "gemma2": 256000, "gpt-oss-120b": 201088,
             "gpt-oss-20b": 201088, "gpt2": 50257, "kimi-linear-48b-a3b": 163840, "lfm2": 65536, "llama": 32000,
             "mamba2": 32768, "mistral": 32000, "mixtral": 32000, "pythia": 50304, "qwen3": 151936,
             "qwen3-next": 151936, "recurrentgemma-2b": 256000, "t5": 32128, "t5-v1_1": 32128,
             "xlstm-7b": 50304}


def _described(capsys, *args):
    assert main(["describe", *args]) == 0
    return capsys.readouterr().out


def test_every_published_preset_names_its_vocabulary_and_no_run_config_holds_it():
    full = [n for n in preset_names() if not n.endswith("-tiny") and n not in ("vaswani", "decoder-small",
                                                                               "encoder-classifier-small")]
    assert sorted(PUBLISHED) == full
    for name, vocab in PUBLISHED.items():
        assert published_vocab(f"preset:{name}") == vocab, name
        assert load(f"preset:{name}").model.vocab_size is None, name  # what a run is built from
    assert published_vocab("preset:vaswani") is None and published_vocab("preset:gpt2", ["model.vocab_size=7"]) == 7


@pytest.mark.parametrize("name,vocab,total,feature", REFERENCE_SIZES)
def test_a_published_preset_is_described_at_its_published_size_without_a_vocab_size(name, vocab, total, feature,
                                                                                        capsys):
    out = _described(capsys, f"preset:{name}")
    assert f"vocab {vocab} (the published model's, from its preset" in out
    assert f"parameters  {total:,} total" in out


def _hf(name):
    tf = pytest.importorskip("transformers")
    from tests.interop.test_hf_bamba import BAMBA_9B  # Bamba-9B's published config
    from tests.interop.test_hf_lfm2 import LFM2_1_2B  # LFM2-1.2B's published config

    return {"deepseek-v3": (tf.DeepseekV3ForCausalLM, tf.DeepseekV3Config()),
            "qwen3-next": (tf.Qwen3NextForCausalLM, tf.Qwen3NextConfig()),
            "mamba2": (tf.Mamba2ForCausalLM, tf.Mamba2Config()),
            "lfm2": (tf.Lfm2ForCausalLM, tf.Lfm2Config(**LFM2_1_2B)),
            "bamba-9b": (tf.BambaForCausalLM, tf.BambaConfig(**BAMBA_9B)),
            "gpt-oss-120b": (tf.GptOssForCausalLM, tf.GptOssConfig(num_hidden_layers=36, num_local_experts=128)),
            "gpt-oss-20b": (tf.GptOssForCausalLM, tf.GptOssConfig(num_hidden_layers=24, num_local_experts=32)),
            "gpt2": (tf.GPT2LMHeadModel, tf.GPT2Config()), "llama": (tf.LlamaForCausalLM, tf.LlamaConfig())}[name]


# qwen3-next and deepseek-v3: test_hf_qwen3_next and test_hf_deepseek_v3 count the same default configs
# (79,674,391,296 and 671,026,404,352), 17 and 15 s on the meta device
@pytest.mark.parametrize("name", ["mamba2", "lfm2", "bamba-9b", "gpt-oss-120b", "gpt-oss-20b", "gpt2", "llama"])
def test_a_published_preset_has_as_many_parameters_as_hf_counts_at_its_published_config(name, capsys):
    from tests.interop.references import meta_parameters

    cls, config = _hf(name)
    hf = meta_parameters(cls, config)
    if name == "deepseek-v3":
        assert hf == 671_026_404_352  # the figure
    out = _described(capsys, f"preset:{name}")
    assert config.vocab_size == PUBLISHED[name] and f"vocab {config.vocab_size} (the published" in out
    assert f"parameters  {hf:,} total" in out, out


def _experiment(tmp_path, **model):
    (tmp_path / "text.txt").write_text("the cat sat on the mat. " * 40)
    return {"name": "v", "seed": 0,
            "model": {"base": "preset:gpt2", "d_model": 16, "n_layers": 1, "n_heads": 2, "max_seq_len": 16, **model},
            "task": {"name": "char_lm", "files": [str(tmp_path / "text.txt")], "seq_len": 16, "tokenizer": "char"},
            "train": {"max_steps": 2, "batch_size": 2, "val_every": 2, "val_batches": 1, "progress_bar": False,
                      "exact_match_samples": 0}}


def test_a_task_s_tokenizer_gives_a_preset_based_run_its_vocabulary(tmp_path, capsys):
    """GPT-2's preset (50257) shrunk and trained on a char task: the model has the tokenizer's rows, and
    describe counts with them; a vocab_size written by the user still has to match, as before."""
    import yaml

    from arch_zoo.experiment import load as load_config
    from arch_zoo.errors import ConfigError
    from arch_zoo.training.restore import restore
    from arch_zoo.training.run import prepare, run_one

    cfg = load_config(_experiment(tmp_path))
    vocab = prepare(cfg).tokenizer.vocab_size
    assert vocab < 100
    run_one(cfg, tmp_path / "run", quiet=True)
    _, model, _ = restore(tmp_path / "run")
    assert model.embed.weight.shape[0] == vocab
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(_experiment(tmp_path)))
    assert f"vocab {vocab} (the task's char tokenizer)" in _described(capsys, str(tmp_path / "exp.yaml"))
    with pytest.raises(ConfigError, match="model.vocab_size"):
        run_one(load_config(_experiment(tmp_path, vocab_size=50257)), tmp_path / "run2", quiet=True)
