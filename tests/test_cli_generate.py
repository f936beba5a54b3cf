"""`arch-zoo generate` prints what `arch_zoo.generation.generate` gives for the same run, prompt and
options, and each sampling option does what it says (README, Decoding)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from arch_zoo.cli import main
from arch_zoo.experiment import load
from arch_zoo.generation import generate
from arch_zoo.training import run_one
from arch_zoo.training.restore import prompt_ids, restore

PROMPT = "return"  # the corpus is code: after it, greedy and beam search write different text
NEW = 40


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A briefly trained char LM: its next-token distributions are broad but no longer uniform, and
    greedy and beam search continue PROMPT differently."""
    out = tmp_path_factory.mktemp("gen") / "run"
    cfg = load({"name": "gen", "seed": 0,
                "model": {"kind": "decoder", "d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64,
                          "max_seq_len": 64, "position": "rope"},
                "task": {"name": "char_lm", "max_chars": 20000, "seq_len": 32},
                "train": {"max_steps": 150, "batch_size": 16, "lr": 5e-3, "val_every": 150, "val_batches": 1,
                          "progress_bar": False}})
    assert run_one(cfg, out, quiet=True).status == "completed"
    cfg, model, tokenizer = restore(out)
    return out, model, tokenizer, prompt_ids(cfg, tokenizer, PROMPT)


def cli(capsys, run_dir, *options):
    capsys.readouterr()
    assert main(["generate", str(run_dir), "--prompt", PROMPT, "--max-new-tokens", str(NEW), *options]) == 0
    return capsys.readouterr().out.rstrip("\n")


def api(run, **options):
    """The Python API on the same run and prompt, with the special tokens the CLI takes from the tokenizer."""
    _, model, tokenizer, ids = run
    out = generate(model, [ids], max_new_tokens=NEW, eos_token_id=tokenizer.eos_id, pad_token_id=tokenizer.pad_id,
                   **options)
    tokens = out.to_lists()[0][0]
    return tokenizer.decode(tokens), tokens


def raw_logits(run, tokens):
    """The model's unfiltered logits for each generated token, from one full forward pass."""
    _, model, _, ids = run
    with torch.no_grad():
        return model(torch.tensor([ids + tokens[:-1]])).logits[0, len(ids) - 1:]


def ranks(run, tokens):
    """How many tokens the model rated above each sampled one (0: the most likely)."""
    logits = raw_logits(run, tokens)
    return (logits > logits.gather(-1, torch.tensor(tokens)[:, None])).sum(-1)


@pytest.mark.outcome
def test_greedy_and_beam_print_what_the_api_returns(run, capsys):
    """README, Decoding: `arch-zoo generate ... --strategy beam --beams 4` decodes like
    `generate(model, prompts, strategy="beam", beams=4)`."""
    greedy = cli(capsys, run[0])
    assert greedy == api(run)[0] and greedy.strip()
    assert api(run, strategy="beam", beams=4)[0] != greedy  # so the test can tell the strategies apart
    ckpt = run[0] / "checkpoints" / "last.ckpt"
    for beams in (2, 4):
        assert cli(capsys, ckpt, "--strategy", "beam", "--beams", str(beams)) == api(run, strategy="beam",
                                                                                      beams=beams)[0]
    assert cli(capsys, run[0], "--strategy", "beam") == api(run, strategy="beam", beams=4)[0]  # the default width
    assert cli(capsys, run[0], "--strategy", "beam", "--beams", "1") == greedy  # a beam of one is greedy


def test_seeded_sampling_is_reproducible_across_processes_and_equals_the_api(run, capsys):
    """README, Decoding: generation "is seeded": the same --seed gives the same text, in this
    process, in a fresh one, and through the Python API; another seed gives other text."""
    options = ["--strategy", "sample", "--temperature", "1.5", "--seed", "3"]
    here = cli(capsys, run[0], *options)
    exe = Path(sys.executable).with_name("arch-zoo")
    proc = subprocess.run([str(exe), "generate", str(run[0]), "--prompt", PROMPT, "--max-new-tokens", str(NEW),
                           *options], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.rstrip("\n") == here
    assert here == api(run, strategy="sample", temperature=1.5, seed=3)[0]
    assert cli(capsys, run[0], *options[:-1], "4") != here


@pytest.mark.outcome
def test_sampling_options_do_what_they_say(run, capsys):
    """temperature, top-k and top-p each reach the sampler and restrict it as documented."""
    greedy = cli(capsys, run[0])
    sample = ["--strategy", "sample", "--seed", "0"]
    # the limits: one token kept (top-k 1, a tiny top-p) or a near-zero temperature is greedy
    assert cli(capsys, run[0], *sample, "--top-k", "1", "--temperature", "5") == greedy
    assert cli(capsys, run[0], *sample, "--top-p", "1e-6", "--temperature", "5") == greedy
    assert cli(capsys, run[0], *sample, "--temperature", "1e-6") == greedy
    assert cli(capsys, run[0], *sample, "--temperature", "2") != greedy  # a warm sampler does sample

    # top-k 3: every sampled token is among the model's 3 most likely; without top-k some are not
    text, tokens = api(run, strategy="sample", top_k=3, temperature=2.0, seed=0)
    assert cli(capsys, run[0], *sample, "--top-k", "3", "--temperature", "2") == text
    assert ranks(run, tokens).max() < 3
    assert ranks(run, api(run, strategy="sample", temperature=2.0, seed=0)[1]).max() >= 3

    # top-p 0.5: every sampled token is inside the smallest set of top tokens whose mass reaches 0.5
    text, tokens = api(run, strategy="sample", top_p=0.5, seed=0)
    assert cli(capsys, run[0], *sample, "--top-p", "0.5") == text
    probs = raw_logits(run, tokens).softmax(-1)
    chosen = probs.gather(-1, torch.tensor(tokens)[:, None])
    mass_before = (probs * (probs > chosen)).sum(-1)  # mass of the tokens ranked above the chosen one
    assert (mass_before < 0.5).all()

    # temperature: a cold sampler picks likelier tokens than a hot one with the same seed
    def mean_log_prob(temperature):
        tokens = api(run, strategy="sample", temperature=temperature, seed=0)[1]
        logp = raw_logits(run, tokens).log_softmax(-1)
        return logp.gather(-1, torch.tensor(tokens)[:, None]).mean().item()

    assert cli(capsys, run[0], *sample, "--temperature", "0.5") == api(run, strategy="sample", temperature=0.5,
                                                                      seed=0)[0]
    assert mean_log_prob(0.5) > mean_log_prob(3.0) + 0.5
