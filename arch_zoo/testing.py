"""The invariants the package's own registry grid checks, for any component: a plugin's too.

    from arch_zoo.testing import check_component
    check_component("positions", "kerple_log")            # every invariant, every model kind it fits
    check_component("norms", "my_norm", {"eps": 1e-6})    # with options

Each check builds tiny models (torch only) around the component, the other choices at their
defaults, and raises ``AssertionError`` naming the invariant and the model, so it reads as a
failed test under pytest. The checks, one function each:

* ``causal_leak``: changing tokens after t never changes outputs up to t (decoder kinds);
* ``padding_invariance``: whatever sits under the padding mask never changes real tokens' outputs
  (right and left padding; the source seen through cross-attention);
* ``cache_parity``: greedy decoding over the key/value cache gives the logits of one full forward;
* ``kernels_agree``: every attention kernel gives the same function (to 1e-5);
* ``trains``: every parameter gets a finite gradient and a few Adam steps cut the loss by 25%.

A mixer (``check_component("mixers", name)``) then meets the conformance oracle (``mixer_checks``):
chunked form = recurrent form at chunk sizes 1, 2, 3 and the sequence length, prefill then decode =
one full forward at every split, the bytes its state keeps alive = its ``nbytes``, and describe's
state bytes = the state's tensors.

A component that needs options to be built, or to act at all in these checks' sequences (5 to 13
tokens: a sliding window must be shorter), declares them for tests as ``example_options`` (a dict)
on its class; ``check_component`` uses them when given none.

What a component of each family is (the class to subclass, the arguments it is built with, what is
called on it) is ``interface(family)``; ``check_interface(family, name)`` holds a component to it.

An optimizer (``train.optimizer``, a plugin's included) has its own checks (``optimizer_checks``):

    check_optimizer("my_lion", {"beta2": 0.99})   # trains, resumes to the same weights, survives DDP
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional

import torch

from .config import ModelConfig
from .experiment import all_registries
from .config.kinds import KINDS as DECLARED_KINDS, kind_of
from .coerce import field_family
from .config.loading import model_config
from .errors import ConfigError
from .generation import generate, left_pad
from .mixer_checks import check_mixer
from .models import build_model
from .optimizer_checks import check_optimizer, optimizer_resumes, optimizer_survives_ddp, optimizer_trains  # noqa: F401
from .plugin_interfaces import INTERFACES, Interface, check_interface, interface  # noqa: F401

VOCAB = 23
KINDS = ("encoder", "decoder", "encoder_decoder")
BASE = {"d_model": 16, "n_layers": 2, "n_heads": 2, "d_ff": 32, "max_seq_len": 32, "n_kv_heads": 1}
TRAIN_STEPS = 8
TRAIN_SIZES = {"d_model": 8, "d_ff": 8, "n_layers": 1}  # the margins below were measured at this size


def model_key(family: str) -> str:
    """The model config key a family is chosen by (``positions`` -> ``position``)."""
    for f in dataclasses.fields(ModelConfig):
        if field_family(f) == family and f.default is not None:
            return f.name
    raise KeyError(f"no model key chooses a component of '{family}'; families: {', '.join(model_families())}")


def model_families() -> List[str]:
    """Families a model config chooses from, in schema order (heads excluded: a head changes what
    the output is, not how the model computes it, and fits only some kinds)."""
    out = []
    for f in dataclasses.fields(ModelConfig):
        if field_family(f) is not None and f.default is not None and f.name != "head":
            out.append(field_family(f))
    return out


def kernel_family() -> str:
    """The family of attention kernels (which never change the function)."""
    regs = all_registries()
    return "attention_kernel" if "attention_kernel" in regs else "attention"


def example_options(family: str, name: str) -> Dict[str, Any]:
    return dict(getattr(all_registries()[family].get(name).factory, "example_options", None) or {})


def config_for(family: str, name: str, options: Optional[Mapping[str, Any]] = None, **changes) -> Dict[str, Any]:
    """A tiny model config mapping with ``family``'s key set to ``name`` (and its options)."""
    opts = dict(options) if options is not None else example_options(family, name)
    return {**BASE, model_key(family): {"name": name, **opts}, **changes}


def _build(cfg: Mapping[str, Any], seed: int = 0):
    torch.manual_seed(seed)
    return build_model(dict(cfg), VOCAB)


def _label(cfg: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in cfg.items() if k not in BASE or cfg[k] != BASE[k])


def _close(a, b, what: str, cfg, atol: float = 1e-5) -> None:
    try:
        torch.testing.assert_close(a, b, atol=atol, rtol=0)
    except AssertionError as exc:
        raise AssertionError(f"{what} ({_label(cfg)}): {str(exc).splitlines()[0]}") from None


def _forward(model, ids, mask=None, dec_ids=None, dec_mask=None):
    if kind_of(model.config).cross_attention:
        return model(ids, dec_ids if dec_ids is not None else ids, mask, dec_mask).logits
    return model(ids, mask).logits


def causal_leak(cfg: Mapping[str, Any]) -> None:
    """Changing the tokens after t leaves the outputs up to t unchanged (decoder and encoder-decoder)."""
    model = _build(cfg).eval()
    ids = torch.randint(1, VOCAB, (2, 8))
    changed, t = ids.clone(), 4
    changed[:, t + 1:] = (changed[:, t + 1:] + 7) % VOCAB
    with torch.no_grad():
        if kind_of(model.config).cross_attention:
            src = torch.randint(1, VOCAB, (2, 6))
            a, b = model(src, ids).logits, model(src, changed).logits
        else:
            a, b = model(ids).logits, model(changed).logits
    _close(a[:, : t + 1], b[:, : t + 1], "causal mask leaks the future", cfg, atol=1e-6)
    assert not torch.allclose(a[:, t + 1:], b[:, t + 1:]), f"later tokens change nothing at all ({_label(cfg)})"


def _scramble(ids, mask):
    out = ids.clone()
    out[mask == 0] = (out[mask == 0] + 5) % VOCAB
    return out


def padding_invariance(cfg: Mapping[str, Any], side: str = "right") -> None:
    """Tokens under the padding mask never change real tokens' outputs; for an encoder-decoder,
    the padded source seen through cross-attention."""
    model = _build(cfg).eval()
    ids = torch.randint(1, VOCAB, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.long)
    if side == "right":
        mask[0, 4:] = 0
    else:
        mask[0, :3] = 0
    with torch.no_grad():
        if kind_of(model.config).cross_attention:
            tgt = torch.randint(1, VOCAB, (2, 5))
            a, b = model(ids, tgt, mask).logits, model(_scramble(ids, mask), tgt, mask).logits
            _close(a, b, "source padding leaks through cross-attention", cfg, atol=1e-6)
            return
        a, b = model(ids, mask).logits, model(_scramble(ids, mask), mask).logits
    _close(a[mask.bool()], b[mask.bool()], f"{side} padding changes real tokens", cfg, atol=1e-6)
    assert torch.isfinite(a).all(), f"non-finite outputs under padding ({_label(cfg)})"


def cache_parity(cfg: Mapping[str, Any], steps: int = 6) -> None:
    """Greedy decoding over the key/value cache (left-padded prompts of different lengths) gives
    the logits of one full forward over the whole sequence, and the tokens of uncached decoding."""
    model = _build(cfg).eval()
    if hasattr(model.head, "proj"):
        with torch.no_grad():  # sharper than the init: no near-ties between the top two tokens
            model.head.proj.weight.mul_(8.0)
    prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17]]
    cached = generate(model, prompts, max_new_tokens=steps, return_logits=True)
    uncached = generate(model, prompts, max_new_tokens=steps, use_cache=False, return_logits=True)
    ids, mask = left_pad(prompts)
    fed = cached.best[:, :-1]
    with torch.no_grad():
        if kind_of(model.config).cross_attention:
            start = torch.full((len(prompts), 1), model.config.pad_token_id)
            full = model(ids, torch.cat((start, fed), 1), attention_mask=mask).logits
        else:
            full = model(torch.cat((ids, fed), 1), torch.cat((mask, torch.ones_like(fed)), 1)).logits
            full = full[:, ids.shape[1] - 1:]
    _close(cached.logits, full, "cached decoding differs from the full forward", cfg)
    assert torch.equal(cached.tokens, uncached.tokens), f"cached and uncached decoding differ ({_label(cfg)})"


def kernels_agree(cfg: Mapping[str, Any]) -> None:
    """Every attention kernel computes the same function, on the same weights (padded batch)."""
    key = model_key(kernel_family())
    names = all_registries()[kernel_family()].choices()
    models = {n: _build({**cfg, key: n}).eval() for n in names}
    ids = torch.randint(1, VOCAB, (2, 6))
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[0, 4:] = 0
    reference = models[names[0]]
    with torch.no_grad():
        expected = _forward(reference, ids, mask)
        for name in names[1:]:
            models[name].load_state_dict(reference.state_dict())
            _close(_forward(models[name], ids, mask), expected, f"kernel '{name}' differs from '{names[0]}'", cfg)


def _token_loss(logits, labels, mask):
    per_token = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels, reduction="none")
    return (per_token * mask).sum() / mask.sum()


def trains(cfg: Mapping[str, Any], steps: int = TRAIN_STEPS, reduction: float = 0.75) -> float:
    """Every parameter gets a finite gradient (matrices a non-zero one) and ``steps`` Adam steps on
    a tiny learnable task (each position predicts its own token, padding ignored) bring the loss
    below ``reduction`` times the first: a detached branch or a norm that zeroes its input fails.
    Built-ins in the pairwise grid: the median model cuts it by about 85%, the slowest (sandwich
    placement in an encoder, whose norm after each branch damps the first updates) by 29%, alike
    under ATEN_CPU_CAPABILITY=default.
    Returns the final / first loss ratio."""
    model = _build(cfg)
    ids = torch.randint(1, VOCAB, (4, 5))
    mask = torch.ones(4, 5, dtype=torch.long)
    mask[1, 3:] = 0
    dec_ids, dec_mask = ids[:, :4], mask[:, :4]
    labels, weight = (dec_ids, dec_mask) if kind_of(model.config).cross_attention else (ids, mask)
    first = _token_loss(_forward(model, ids, mask, dec_ids, dec_mask), labels, weight)
    assert torch.isfinite(first), f"non-finite loss at initialisation ({_label(cfg)})"
    first.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not missing, f"no finite gradient for {missing} ({_label(cfg)})"
    dead = [n for n, p in model.named_parameters() if p.dim() > 1 and p.grad.abs().sum() == 0
            and "position.table" not in n and ".experts." not in n]  # unused table rows, unrouted experts
    assert not dead, f"all-zero gradient for {dead} ({_label(cfg)})"
    opt = torch.optim.Adam(model.parameters(), lr=5e-2)
    for _ in range(steps):
        opt.step()
        opt.zero_grad()
        loss = _token_loss(_forward(model, ids, mask, dec_ids, dec_mask), labels, weight)
        loss.backward()
    ratio = loss.item() / first.item()
    assert ratio < reduction, f"{steps} Adam steps took the loss only from {first.item():.3f} to {loss.item():.3f} " \
                              f"({_label(cfg)})"
    return ratio


# invariant -> the model kinds (and variants) it applies to
CHECKS: Dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "causal_leak": causal_leak, "padding_invariance": padding_invariance, "cache_parity": cache_parity,
    "kernels_agree": kernels_agree, "trains": trains,
}


def cases(cfg: Mapping[str, Any], kinds: Iterable[str] = KINDS) -> List[tuple]:
    """(check name, function, config) for every invariant that applies to ``cfg`` under each kind."""
    out = []
    for kind in kinds:
        c = {**cfg, "kind": kind}
        if DECLARED_KINDS[kind].decodes:
            out += [("causal_leak", causal_leak, c), ("cache_parity", cache_parity, c)]
        out.append(("padding_invariance", padding_invariance, c))
        if DECLARED_KINDS[kind].decoder_only:  # left padding: prompts of one causal sequence
            out.append(("padding_invariance (left)", lambda c: padding_invariance(c, "left"), c))
        out += [("kernels_agree", kernels_agree, c), ("trains", trains, {**c, **TRAIN_SIZES})]
    return out


def builds(cfg: Mapping[str, Any]) -> bool:
    """Whether ``cfg`` (tiny sizes filled in) is a valid model config (a parallel block has no
    cross-attention form, say): combinations the config refuses are not the invariants' to check."""
    try:
        model_config({**BASE, **cfg})
    except ConfigError:
        return False
    return True


def check_model(cfg: Mapping[str, Any], kinds: Iterable[str] = KINDS) -> List[str]:
    """Every invariant on the model config ``cfg`` (tiny sizes filled in) under each kind that
    ``cfg`` validates for; the names of the checks that ran."""
    ran, refused = [], []
    for name, check, c in cases({**BASE, **cfg}, kinds):
        try:
            model_config(c)
        except ConfigError as exc:  # e.g. a scheme that cannot serve an encoder: not this kind's to check
            refused.append(f"{c['kind']}: {exc}")
            continue
        check(c)
        ran.append(f"{name} [{c['kind']}]")
    assert ran, f"no model kind builds with {_label(cfg)} ({'; '.join(dict.fromkeys(refused))})"
    return ran


def check_component(family: str, name: str, options: Optional[Mapping[str, Any]] = None,
                    kinds: Iterable[str] = KINDS, **changes) -> List[str]:
    """Every invariant on component ``name`` of ``family`` (``positions``, ``norms``,
    ``feedforward``, ... : the registry families a model config chooses from), built with
    ``options`` (default: its ``example_options``) in tiny models of each kind it fits, other keys
    at their defaults or as ``changes`` set them. Raises AssertionError on the first broken
    invariant; returns the names of the checks that ran. The component must first fit its family's
    interface (``check_interface``: base class, constructor arguments). A mixer then meets the
    conformance oracle (``mixer_checks.check_mixer``), in a decoder whatever ``kinds`` says."""
    all_registries()[family].get(name)  # an unknown name is a clear error, not an empty run
    check_interface(family, name)
    ran = check_model(config_for(family, name, options, **changes), kinds)
    if family == "mixers":
        ran += check_mixer(name, options, **{k: v for k, v in changes.items() if k != "kind"})
    return ran
