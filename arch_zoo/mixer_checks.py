"""The conformance oracle for sequence mixers (``model.mixer``), a plugin's as much as a built-in's:
``check_mixer(name)`` (``arch_zoo.testing.check_component("mixers", name)`` runs it after the
invariant grid). It builds a one-layer decoder around the mixer (tiny sizes, float64 where the mixer
runs in it, so the tolerance is 1e-10; float32 and 1e-4 where it does not) and checks, through the
model's own forward and decoding cache:

* ``chunks_agree``: a mixer whose options have ``chunk_size`` computes, at chunk sizes 1, 2, 3 and the
  whole sequence, the logits its recurrent form gives one position at a time;
* ``prefill_then_decode``: a prefill of the first s tokens, then decoding one token at a time, gives
  the logits of one full forward, at every split s = 0 .. length;
* ``state_keeps_what_it_reports``: the storage a decoding state keeps alive (every tensor it
  references, each storage counted once) is its ``nbytes``, right after the prefill and after decoding
  steps (a slice of a prefill's buffer keeps the whole buffer);
* ``state_formula``: the decoding-state bytes ``describe`` prints (``decoding_state_bytes``, from the
  mixer's ``state_elements``) are the numbers the state holds (a K/V cache: its live keys);
* ``packed_equals_separate``: rows packing documents of different lengths (``DOCUMENTS``, a one-token
  one among them), kept apart by ``document_ids``, give each document the logits it gets alone, however
  the mixer declares it keeps them apart (``document_boundaries``: a mask, rows, its own reset).

Each failure is one AssertionError naming the mixer and the check."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Mapping, Optional

import torch
from torch import Tensor

from .components.mixers import MIXERS
from .components.mixers.documents import WAYS
from .components.state import DecodingState, KVCache
from .models import build_model
from .models.flops import decoding_state_bytes

LENGTH, BATCH, VOCAB = 7, 2, 23
CHUNKS = (1, 2, 3, LENGTH)
SIZES = {"kind": "decoder", "d_model": 16, "n_layers": 1, "n_heads": 2, "n_kv_heads": 1, "d_ff": 16,
         "max_seq_len": 16}
TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-4}
DOCUMENTS = ((3, 4), (2, 1, 4))  # packed_equals_separate: each row's documents' lengths (LENGTH tokens a row)


class Oracle:
    """One mixer's model, inputs and full-forward logits, shared by the checks."""

    def __init__(self, name: str, options: Mapping[str, Any], changes: Mapping[str, Any]):
        self.name, self.options = name, dict(options)
        self.cfg = {**SIZES, **changes, "mixer": {"name": name, **self.options}}
        self.ids = torch.randint(1, VOCAB, (BATCH, LENGTH), generator=torch.Generator().manual_seed(0))
        self.model, self.dtype = self._build(self.cfg)
        self.tol = TOLERANCE[self.dtype]
        with torch.no_grad():
            self.full = self.model(self.ids).logits

    def _build(self, cfg, like=None):
        torch.manual_seed(0)
        model = build_model(dict(cfg), VOCAB).eval()
        if like is not None:  # the same weights in another configuration (a chunk size)
            model = model.to(self.dtype)
            model.load_state_dict(like.state_dict())
            return model, self.dtype
        try:  # float64 where the mixer computes in it: tight tolerances
            wide = model.to(torch.float64)
            with torch.no_grad():
                wide(self.ids[:, :2])
            return wide, torch.float64
        except (RuntimeError, TypeError):
            return model.to(torch.float32), torch.float32

    def fail(self, check: str, what: str) -> AssertionError:
        return AssertionError(f"mixer '{self.name}' fails {check}: {what} "
                              f"({self.dtype}, tolerance {self.tol:g}; options "
                              f"{', '.join(f'{k}={v}' for k, v in self.options.items()) or 'none'})")

    def close(self, got: Tensor, want: Tensor, check: str, what: str) -> None:
        diff = (got - want).abs().max().item() if got.shape == want.shape else None
        if diff is None or not diff <= self.tol:  # NaN fails too
            shown = f"shape {tuple(got.shape)} vs {tuple(want.shape)}" if diff is None else f"max |diff| {diff:.3g}"
            raise self.fail(check, f"{what}, {shown}")

    def decode(self, model, split: int, after_each: Optional[Callable] = None) -> Tensor:
        """Logits of a prefill of ``split`` tokens, then one token a step (``after_each(cache, seen)``)."""
        cache, out = model.new_cache(), []
        with torch.no_grad():
            if split:
                out.append(model(self.ids[:, :split], cache=cache).logits)
                if after_each:
                    after_each(cache, split)
            for t in range(split, LENGTH):
                out.append(model(self.ids[:, t: t + 1], cache=cache).logits)
                if after_each:
                    after_each(cache, t + 1)
        return torch.cat(out, dim=1)


def mixer_states(cache) -> List[DecodingState]:
    """Each layer's mixer state in a model's eager cache."""
    return [layer.mixer for layer in cache.layers]


def kept_alive(state: DecodingState) -> int:
    """Bytes of the distinct storages every tensor ``state`` references keeps allocated (found in its
    attributes, not taken from its own ``tensors()``, which is what is being checked)."""
    storages: Dict[int, int] = {}

    def visit(obj, depth=0):
        if isinstance(obj, Tensor):
            s = obj.untyped_storage()
            storages[s.data_ptr()] = s.nbytes()
        elif isinstance(obj, (list, tuple, set)):
            for item in obj:
                visit(item, depth)
        elif isinstance(obj, dict):
            for item in obj.values():
                visit(item, depth)
        elif isinstance(obj, DecodingState) and depth < 4:
            for item in vars(obj).values():
                visit(item, depth + 1)

    visit(state)
    return sum(storages.values())


def held_elements(state: DecodingState) -> int:
    """Numbers ``state`` holds: a K/V cache's live keys and values (its buffers keep room to grow),
    any other state's tensors; a composite's (``parts``: a parallel layer's), its parts'."""
    parts = getattr(state, "parts", None)
    if parts is not None:
        return sum(map(held_elements, parts))
    if isinstance(state, KVCache):
        return 0 if state.k is None else state.k.numel() + state.v.numel()
    return sum(t.numel() for t in state.tensors())


def chunks_agree(o: Oracle) -> Optional[str]:
    if "chunk_size" not in {f.name for f in dataclasses.fields(MIXERS.get(o.name).options)}:
        return None
    recurrent = o.decode(o.model, 0)
    for chunk in CHUNKS:
        model, _ = o._build({**o.cfg, "mixer": {**o.cfg["mixer"], "chunk_size": chunk}}, like=o.model)
        with torch.no_grad():
            chunked = model(o.ids).logits
        o.close(chunked, recurrent, "chunks_agree",
                f"the chunked form at chunk_size={chunk} differs from the recurrent form (one position at a time)")
    return f"chunks_agree [chunk_size {', '.join(map(str, CHUNKS))}]"


def prefill_then_decode(o: Oracle) -> str:
    for split in range(LENGTH + 1):
        o.close(o.decode(o.model, split), o.full, "prefill_then_decode",
                f"a prefill of {split} tokens then decoding one token at a time differs from one full forward "
                f"of {LENGTH}")
    return f"prefill_then_decode [splits 0-{LENGTH}]"


def state_keeps_what_it_reports(o: Oracle) -> str:
    def check(cache, seen):
        for i, state in enumerate(mixer_states(cache)):
            kept, reported = kept_alive(state), state.nbytes
            if kept != reported:
                when = "right after a prefill" if seen == LENGTH - 3 else f"after a decoding step ({seen} seen)"
                raise o.fail("state_keeps_what_it_reports", f"layer {i}'s {type(state).__name__} keeps {kept} bytes "
                             f"alive but reports nbytes = {reported}, {when}")

    o.decode(o.model, LENGTH - 3, check)
    return "state_keeps_what_it_reports"


def state_formula(o: Oracle) -> str:
    size = torch.empty((), dtype=o.dtype).element_size()

    def check(cache, seen):
        held = sum(held_elements(s) for s in mixer_states(cache)) * size
        stated = decoding_state_bytes(o.model, seen, size) * BATCH
        if held != stated:
            raise o.fail("state_formula", f"describe's state bytes (state_elements) say {stated // BATCH} a row after "
                         f"{seen} positions, the state holds {held / BATCH:g}")

    o.decode(o.model, LENGTH - 3, check)
    return "state_formula"


def packed_equals_separate(o: Oracle) -> str:
    if declared(o.model) not in WAYS:
        raise o.fail("packed_equals_separate", f"document_boundaries = {declared(o.model)!r} is none of "
                     f"{', '.join(WAYS)}")
    document_ids = torch.stack([torch.cat([torch.full((n,), d) for d, n in enumerate(sizes)]) for sizes in DOCUMENTS])
    with torch.no_grad():
        packed = o.model(o.ids, document_ids=document_ids).logits
        for row, sizes in enumerate(DOCUMENTS):
            start = 0
            for d, n in enumerate(sizes):
                alone = o.model(o.ids[row: row + 1, start: start + n]).logits
                o.close(packed[row: row + 1, start: start + n], alone, "packed_equals_separate",
                        f"document {d} (tokens {start}-{start + n - 1}) of a row packing documents of "
                        f"{', '.join(map(str, sizes))} tokens gets other logits than alone: something crosses a "
                        f"document start (document_boundaries = '{declared(o.model)}')")
                start += n
    return "packed_equals_separate"


def declared(model) -> str:
    """How the oracle's one mixer says it keeps documents apart."""
    return getattr(model.decoder.layers[0].mixer.sublayer, "document_boundaries", "rows")


# name -> check; each returns the name it ran under (None: it does not apply to this mixer)
MIXER_CHECKS: Dict[str, Callable[[Oracle], Optional[str]]] = {
    "chunks_agree": chunks_agree, "prefill_then_decode": prefill_then_decode,
    "state_keeps_what_it_reports": state_keeps_what_it_reports, "state_formula": state_formula,
    "packed_equals_separate": packed_equals_separate,
}


def check_mixer(name: str, options: Optional[Mapping[str, Any]] = None, **changes) -> List[str]:
    """Every conformance check on mixer ``name`` (options: its ``example_options`` when None; other
    model keys as ``changes`` set them); the names of those that ran. A mixer that serves no decoder
    has no decoding state to check: none run."""
    factory = MIXERS.get(name).factory
    if "decoder" not in factory.stacks:
        return []
    opts = dict(getattr(factory, "example_options", None) or {}) if options is None else options
    o = Oracle(name, opts, changes)
    return [ran for check in MIXER_CHECKS.values() if (ran := check(o)) is not None]
