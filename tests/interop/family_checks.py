"""The checks every decoder family's parity test makes beyond references.py's logits and generation:
the preset's model, ``from_hf(to_hf(model))`` bit for bit, an export loaded by transformers alone in a
fresh process, ``arch-zoo import`` of a saved checkpoint, the full preset's parameters against HF's
class, a one-line refusal; plus the seeding of the reference models."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.interop.references import ATOL, meta_parameters, padded_batch, randomize, tiny

ROOT = Path(__file__).resolve().parents[2]


def seeded(cls, config, seed: int = 0):
    """``cls`` at ``config`` with weights drawn from ``seed`` (randomize), in eval mode."""
    torch.manual_seed(seed)
    return randomize(cls(config), seed).eval()


def with_router_bias(ref, seed: int):
    """``ref`` with random expert-selection biases: randomize leaves that buffer at zero, where it would not act."""
    g = torch.Generator().manual_seed(seed)
    for layer in ref.model.layers:
        if hasattr(layer.mlp, "gate"):
            bias = layer.mlp.gate.e_score_correction_bias
            bias.copy_(torch.randn(bias.shape, generator=g) * 0.3)
    return ref


def rebuilt(ref, model, layout: str):
    """(hf, again): ``to_hf(model)`` is ``ref``'s class with ``ref``'s layer ``layout`` (a config field),
    and ``from_hf`` of it holds ``model``'s tensors bit for bit; the callers compare the configs."""
    from arch_zoo.interop import from_hf, to_hf
    from arch_zoo.interop.export_hf import native_config, sized

    assert native_config(sized(model)).reason == f"written as {type(ref).__name__}"
    hf = to_hf(model)
    assert type(hf) is type(ref) and getattr(hf.config, layout) == getattr(ref.config, layout)
    again = from_hf(hf)
    ours, back = model.state_dict(), again.state_dict()
    assert set(ours) == set(back) and all(torch.equal(back[k], v) for k, v in ours.items())
    return hf, again


def assert_export_loads_alone(tmp_path, model, job: dict) -> None:
    """The export in ``job["dir"]``, loaded by ``tests.interop.hf_load`` in a fresh process (transformers
    alone, offline), gives ``model``'s logits at the real tokens of ``job``'s right and left batches and
    its greedy tokens after each prompt."""
    from arch_zoo.generation import generate

    torch.save([job], tmp_path / "jobs.pt")
    subprocess.run([sys.executable, "-m", "tests.interop.hf_load", str(tmp_path / "jobs.pt"), str(tmp_path / "out.pt")],
                   cwd=ROOT, check=True, env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1",
                                              "HF_HOME": str(tmp_path / "hf_home"), "TRANSFORMERS_OFFLINE": "1"})
    got = torch.load(tmp_path / "out.pt")[job["dir"]]
    for side in ("right", "left"):
        ids, mask = job[side]
        with torch.no_grad():
            ours = model(ids, mask).logits[mask.bool()]
        torch.testing.assert_close(got[side][mask.bool()], ours, atol=ATOL, rtol=0)
    for prompt, theirs in zip(job["prompts"], got["greedy"]):
        assert theirs[len(prompt):] == generate(model, [prompt], max_new_tokens=job["new_tokens"]).to_lists()[0][0]


def imported(directory: Path, tok):
    """(config, model in eval mode) of the run ``arch-zoo import`` makes of the checkpoint in ``directory``,
    with ``tok`` saved beside it as a transformers tokenizer."""
    from transformers import PreTrainedTokenizerFast

    from arch_zoo import restore
    from arch_zoo.cli import main

    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(directory)
    out = directory.parent / "run"
    assert main(["import", str(directory), "--out", str(out)]) == 0
    cfg, model, _ = restore(out)
    return cfg, model.eval()


def assert_import_reads_a_saved_checkpoint(tmp_path, reference, name: str):
    """``reference(vocab_size=...)`` at the test tokenizer's vocabulary, saved by ``save_pretrained`` and
    imported by ``arch-zoo import``, is a run with the ``{name}-tiny`` preset's layers and the reference's
    logits; its config, for the callers' further checks."""
    from tests.evaluation.helpers import bos_tokenizer
    from tests.interop.references import assert_same_logits

    tok = bos_tokenizer()
    ref = reference(vocab_size=tok.get_vocab_size())
    ref.save_pretrained(tmp_path / "hf")
    cfg, model = imported(tmp_path / "hf", tok)
    assert cfg.model.layers == tiny(name).layers
    assert_same_logits(ref, model, "right")
    return cfg


def described(capsys, cls, config, preset: str):
    """(the parameters of ``cls`` at a published ``config``, counted on the meta device; what
    ``arch-zoo describe`` prints for the full ``preset`` at that config's vocabulary)."""
    from arch_zoo.cli import main

    hf = meta_parameters(cls, config)
    assert main(["describe", preset, "--vocab-size", str(config.vocab_size)]) == 0
    return hf, capsys.readouterr().out


def preset_model(ref, name: str, sublayers: list[str]):
    """``from_hf(ref)`` under the ``{name}-tiny`` preset: that preset's config exactly, its layers' mixers
    of the classes ``sublayers`` names."""
    from arch_zoo.interop import from_hf

    model = from_hf(ref, config=f"preset:{name}-tiny")
    assert model.config == tiny(name)
    assert [type(layer.mixer.sublayer).__name__ for layer in model.decoder.layers] == sublayers
    return model


def assert_refused_in_one_line(hf, match: str) -> None:
    """``from_hf(hf)`` refuses it with a one-line CheckpointError matching ``match``."""
    from arch_zoo.interop import from_hf
    from arch_zoo.interop.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match=match) as info:
        from_hf(hf)
    assert "\n" not in str(info.value)


def assert_left_padded_rows_equal_hf_alone(ref, model, lengths, total: int = 12) -> None:
    """Each left-padded row's real positions give the logits HF gives that row unpadded (for a family
    whose HF model masks no left padding: RecurrentGemma, xLSTM)."""
    ids, mask = padded_batch(lengths, total, "left")
    with torch.no_grad():
        ours = model(ids, mask).logits
        for row, n in enumerate(lengths):
            theirs = ref(input_ids=ids[row:row + 1, total - n:]).logits[0]
            assert theirs.abs().max() > 0.1
            torch.testing.assert_close(ours[row, total - n:], theirs, atol=ATOL, rtol=0)
