"""`arch-zoo describe` and `arch-zoo components`: what they print is what the model and the registry hold."""
import dataclasses
import re
from typing import List

import pytest

from arch_zoo.cli import main
from arch_zoo.config.loading import save
from arch_zoo.experiment import load
from arch_zoo.data.tokenizers import CharTokenizer
from arch_zoo.models import build_model


def _described(capsys, *args) -> tuple:
    assert main(["describe", *map(str, args)]) == 0
    out = capsys.readouterr().out
    vocab = int(re.search(r"vocab (\d+)", out).group(1))
    total = int(re.search(r"parameters  ([\d,]+) total", out).group(1).replace(",", ""))
    return vocab, total, out


def _total(cfg, vocab: int) -> int:
    return sum(p.numel() for p in build_model(cfg.model, vocab).parameters())


def test_describe_an_experiment_counts_with_the_task_s_vocabulary(capsys):
    """README (tour): "`arch-zoo describe configs/experiments/copy.yaml`: an experiment counts with
    its task's tokenizer" (not an assumed 32000)."""
    from arch_zoo.training.run import prepare

    cfg = load("configs/experiments/copy.yaml")
    vocab, total, out = _described(capsys, "configs/experiments/copy.yaml")
    assert vocab == prepare(cfg).tokenizer.vocab_size < 100 and "(the task's char tokenizer)" in out
    assert total == _total(cfg, vocab)


@pytest.fixture
def run_dir(tmp_path):
    """What a run leaves for describe: its resolved config.yaml and tokenizer.json."""
    cfg = load("configs/experiments/char_lm.yaml", ["task.max_chars=2000"])
    save(cfg, tmp_path / "config.yaml")
    CharTokenizer().fit(["a small alphabet"]).save(tmp_path)
    return tmp_path, cfg


def test_describe_a_run_directory_or_its_config_uses_the_run_s_tokenizer(run_dir, capsys):
    """README (tour): "`arch-zoo describe runs/copy`: a run directory: with the run's tokenizer.json";
    its config.yaml given as a file does the same."""
    path, cfg = run_dir
    vocab = CharTokenizer().fit(["a small alphabet"]).vocab_size
    for source in (path, path / "config.yaml"):
        got, total, out = _described(capsys, source)
        assert got == vocab and "(the run's tokenizer.json)" in out
        assert total == _total(cfg, vocab)
    got, total, _ = _described(capsys, path, "model.n_layers=1")  # overrides apply to a run's config too
    assert got == vocab and total == _total(load(path / "config.yaml", ["model.n_layers=1"]), vocab)


def test_describe_a_directory_without_a_config_is_a_one_line_error(tmp_path, capsys):
    assert main(["describe", str(tmp_path)]) == 2
    assert re.search(r"is a directory without config\.yaml; give a run directory", capsys.readouterr().err)


def _line(out: str, name: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(f"  {name} "))


def test_components_shows_list_defaults_and_required_options_as_they_are(capsys):
    """`files` and `eval_lengths` default to []; only an option the dataclass cannot be built
    without reads 'required'."""
    from arch_zoo.describe import _options
    from arch_zoo.experiment import all_registries
    from arch_zoo.registry import Registry

    assert main(["components"]) == 0
    out = capsys.readouterr().out
    assert "files=[]" in _line(out, "char_lm") and "eval_lengths=[]" in _line(out, "char_lm")
    for registry in all_registries().values():
        for entry in registry.entries():
            entry.options()  # every registered option has a default...
            assert "required" not in _line(out, entry.name)  # ...and none is shown as required

    @dataclasses.dataclass(frozen=True)
    class Opts:
        size: int
        lengths: List[int] = dataclasses.field(default_factory=lambda: [64, 128])

    reg = Registry("demo", "demo")
    reg.register("x", Opts, "a demo")(lambda opts: None)
    assert _options(reg.get("x")) == "  [size=required, lengths=[64, 128]]"


def test_components_says_which_ffns_are_gated_and_their_d_ff_default(capsys):
    assert main(["components"]) == 0
    out = capsys.readouterr().out
    for name in ("swiglu", "geglu", "reglu"):
        assert "(gated; d_ff default 8/3 * d_model, up to a multiple of 8)" in _line(out, name)
    for name in ("relu", "gelu", "gelu_tanh"):
        assert _line(out, name).endswith("(d_ff default 4 * d_model)")


def test_describe_counts_flops_at_a_stated_length_the_task_s_by_default(tmp_path, capsys):
    """Issue 26 §1: FLOPs/token at the length trained (the task's 32-token windows), as summary.json
    counts them, not at max_seq_len 512; --seq-len or model.max_seq_len when asked or when no task
    gives lengths, each line saying which. The numbers are FlopCounterMode's."""
    import torch

    from arch_zoo.formatting import si
    from arch_zoo.training.run import prepare
    from tests.models.flop_reference import measured_forward_flops

    data = {"name": "x", "model": {"kind": "decoder", "d_model": 32, "n_layers": 2, "n_heads": 4, "d_ff": 64,
                                   "max_seq_len": 512, "attention_kernel": "explicit"},
            "task": {"name": "char_lm", "max_chars": 20000, "seq_len": 32}}
    path = tmp_path / "x.yaml"
    save(load(data), path)
    vocab = prepare(load(path)).tokenizer.vocab_size
    model = build_model(load(path).model, vocab)

    def measured(n):
        return si(measured_forward_flops(model, input_ids=torch.zeros(1, n, dtype=torch.long)) / n)

    def flops_line(*extra):
        out = _described(capsys, path, *extra)[2]
        line = out.split("forward FLOPs per token  ", 1)[1].splitlines()
        return line[0].split(" ")[0], line[1]

    value, where = flops_line()
    assert value == measured(32) and where.startswith("  at the task's training lengths (")
    assert "mean 32 tokens" in where
    value, where = flops_line("--seq-len", 64)
    assert value == measured(64) and where == "  at length 64 (--seq-len)"
    value, where = flops_line("--vocab-size", vocab)  # no task data read: the model's own length, said so
    assert value == measured(512) and where.startswith("  at length 512 (model.max_seq_len")
def test_the_count_only_build_counts_what_a_plain_meta_build_counts():
    """describe builds beside torch.device("meta") with fills skipped and ``arange`` on the CPU (so that
    torch._dynamo stays unimported); every count and FLOP figure it prints must be the plain meta build's:
    each tiny preset (the full-size ones share their code), one full-size, and each position scheme (the
    schemes compute their tables at build time)."""
    import contextlib
    import pathlib

    import torch

    import arch_zoo
    from arch_zoo.components.positions import POSITIONS
    from arch_zoo.describe import _CountOnly
    from arch_zoo.models.summary import active_parameters, count_parameters, flops_per_token, parameter_breakdown

    def figures(model_cfg, count_only):
        with torch.device("meta"), _CountOnly() if count_only else contextlib.nullcontext():
            model = build_model(model_cfg, 1000)
        assert all(p.is_meta for p in model.parameters())  # still no memory for a 7B preset
        return count_parameters(model), active_parameters(model), parameter_breakdown(model), flops_per_token(model, 64)

    presets = sorted(p.stem for p in (pathlib.Path(arch_zoo.__file__).parent / "models" / "presets").glob("*-tiny.yaml"))
    configs = [load(f"preset:{name}").model for name in presets + ["llama"]]
    configs += [load("preset:t5-tiny", [f"model.position={p}"]).model for p in POSITIONS.choices()]
    assert len(presets) > 10
    for cfg in configs:
        assert figures(cfg, True) == figures(cfg, False), cfg
