"""The conformance oracle (``arch_zoo.mixer_checks``, run by ``testing.check_component("mixers", ...)``)
over every built-in mixer the registry holds (a new one is covered by registering it), and against
plugin mixers broken the ways users report: a decode path that drops the state, a chunked form that
depends on the chunk size, a state that keeps its prefill's buffer alive, a state size overstated, a
state or convolution window that runs on across a packed document's start."""
import contextlib
import dataclasses
import re

import pytest
import torch

from arch_zoo import testing
from arch_zoo.components.mixers import MIXERS
from arch_zoo.components.mixers.gated_deltanet import GatedDeltaNet, GatedDeltaNetOptions
from arch_zoo.components.mixers.linear_attention import LinearAttention, LinearAttentionOptions
from arch_zoo.components.mixers.short_conv import GatedShortConv, ShortConvOptions
from arch_zoo.components.state import RecurrentState
from arch_zoo.mixer_checks import CHUNKS, LENGTH, Oracle, check_mixer, kept_alive

BUILT_IN = [e.name for e in MIXERS.entries() if e.factory.__module__.startswith("arch_zoo.")]


def _chunked(name: str) -> bool:
    return "chunk_size" in {f.name for f in dataclasses.fields(MIXERS.get(name).options)}


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_built_in_mixer_conforms(name):
    """In float64 (tolerance 1e-10), every check that applies runs and holds."""
    assert Oracle(name, testing.example_options("mixers", name), {}).dtype == torch.float64
    ran = check_mixer(name)
    assert ran == [f"chunks_agree [chunk_size {', '.join(map(str, CHUNKS))}]"] * _chunked(name) + [
        f"prefill_then_decode [splits 0-{LENGTH}]", "state_keeps_what_it_reports", "state_formula",
        "packed_equals_separate"]


def test_the_registry_s_chunked_mixers_are_the_ones_with_a_chunk_size():
    assert {"gated_deltanet", "mamba2", "linear_attention", "rg_lru", "mlstm"} <= {n for n in BUILT_IN if _chunked(n)}


class DropsState(GatedShortConv):
    """Decoding forgets the window: each step convolves as if the sequence began there."""

    def forward(self, x, inputs, state=None):
        return super().forward(x, inputs, None if x.shape[1] == 1 else state)


class ChunkDependent(LinearAttention):
    """A parallel form that changes with the chunk size (a carry dropped between chunks, say)."""

    def forward(self, x, inputs, state=None):
        out = super().forward(x, inputs, state)
        return out * 1.01 if x.shape[1] > self.chunk else out


class KeepsViews(RecurrentState):
    def write(self, name, value):  # no copy: a slice of the prefill's convolution input keeps it all
        self._t[name] = value


class KeepsPrefill(GatedDeltaNet):
    def new_state(self):
        return KeepsViews()


class Overstated(GatedDeltaNet):
    def state_elements(self, context):
        return 4 * super().state_elements(context)


class LeaksAcrossDocuments(GatedShortConv):
    """Says it resets its window at document starts itself, and does not: the window runs on."""

    document_boundaries = "native"


class AttendsPastTheMask(GatedDeltaNet):
    """Says it reads other positions only through the mask (as attention does); its state runs on."""

    document_boundaries = "mask"


class UnknownWay(GatedShortConv):
    document_boundaries = "reset"


BROKEN = {
    "drops_state": (DropsState, ShortConvOptions, r"mixer 'test_drops_state' fails prefill_then_decode: a prefill of 0 "
                    r"tokens then decoding one token at a time differs from one full forward of 7, max \|diff\|"),
    "chunk_dependent": (ChunkDependent, LinearAttentionOptions, r"mixer 'test_chunk_dependent' fails chunks_agree: the "
                        r"chunked form at chunk_size=1 differs from the recurrent form"),
    "keeps_prefill": (KeepsPrefill, GatedDeltaNetOptions, r"mixer 'test_keeps_prefill' fails state_keeps_what_it_reports"
                      r": layer 0's KeepsViews keeps \d+ bytes alive but reports nbytes = \d+, right after a prefill"),
    "leaks_documents": (LeaksAcrossDocuments, ShortConvOptions, r"mixer 'test_leaks_documents' fails "
                        r"packed_equals_separate: document 1 \(tokens 3-6\) of a row packing documents of 3, 4 tokens "
                        r"gets other logits than alone: something crosses a document start \(document_boundaries = "
                        r"'native'\), max \|diff\|"),
    "mask_only_claimed": (AttendsPastTheMask, GatedDeltaNetOptions, r"mixer 'test_mask_only_claimed' fails "
                          r"packed_equals_separate: document 1 .*\(document_boundaries = 'mask'\)"),
    "unknown_way": (UnknownWay, ShortConvOptions, r"mixer 'test_unknown_way' fails packed_equals_separate: "
                    r"document_boundaries = 'reset' is none of mask, rows, native"),
    "overstated": (Overstated, GatedDeltaNetOptions, r"mixer 'test_overstated' fails state_formula: describe's state "
                   r"bytes \(state_elements\) say \d+ a row after 4 positions, the state holds \d+"),
}


@contextlib.contextmanager
def registered(name, cls, options):
    MIXERS.register(name, options, cls.__doc__ or name)(cls)
    try:
        yield name
    finally:
        MIXERS.unregister(name)  # later tests see the built-ins only


@pytest.fixture
def broken(request):
    cls, options, message = BROKEN[request.param]
    with registered(f"test_{request.param}", cls, options) as name:
        yield name, message


@pytest.mark.parametrize("broken", list(BROKEN), indirect=True)
def test_the_oracle_names_the_mixer_and_the_check_a_broken_plugin_fails(broken):
    name, message = broken
    with pytest.raises(AssertionError, match=message) as err:
        check_mixer(name)
    assert "\n" not in str(err.value) and "(torch.float64, tolerance 1e-10" in str(err.value)


@pytest.mark.parametrize("broken", ["overstated"], indirect=True)
def test_the_public_tester_runs_the_oracle_after_the_grid(broken):
    """The invariant grid cannot see a state size stated wrong; check_component now does."""
    name, message = broken
    with pytest.raises(AssertionError, match=message):
        testing.check_component("mixers", name, kinds=["decoder"])


def test_kept_alive_counts_each_storage_once_and_the_whole_of_it():
    buffer = torch.zeros(10, 4)
    state = RecurrentState()
    state._t.update(a=buffer[:2], b=buffer[5:], c=torch.zeros(3))
    assert kept_alive(state) == (40 + 3) * 4


def test_the_own_mixer_page_quotes_the_message_a_broken_plugin_gets():
    from tests.test_docs import DOCS

    page = " ".join((DOCS / "how-to" / "own-mixer.md").read_text().split())
    quoted = re.search(r"`(mixer 'my_mixer' fails [^`]+)`", page).group(1)
    with registered("my_mixer", DropsState, ShortConvOptions), pytest.raises(AssertionError) as err:
        check_mixer("my_mixer")
    number = r"\|diff\| [0-9.e+-]+"  # the one figure the page rounds as the oracle prints it
    assert re.sub(number, "", str(err.value)) == re.sub(number, "", quoted)
    assert float(re.search(number, quoted).group(0).split()[-1]) == pytest.approx(
        float(re.search(number, str(err.value)).group(0).split()[-1]), rel=0.05)


class Float32Only(GatedShortConv):
    def forward(self, x, inputs, state=None):
        if x.dtype == torch.float64:
            raise TypeError("this kernel takes float32 only")
        return super().forward(x, inputs, state)


def test_a_mixer_without_float64_is_checked_in_float32_at_the_stated_tolerance():
    with registered("test_float32_only", Float32Only, ShortConvOptions) as name:
        oracle = Oracle(name, {"conv_size": 3}, {})
        assert (oracle.dtype, oracle.tol) == (torch.float32, 1e-4)
        assert "prefill_then_decode [splits 0-7]" in check_mixer(name)


def test_the_own_mixer_page_quotes_the_message_a_leaking_plugin_gets():
    from tests.test_docs import DOCS

    page = " ".join((DOCS / "how-to" / "own-mixer.md").read_text().split())
    quoted = re.search(r"`(mixer 'my_mixer' fails packed_equals_separate: [^`]+), \.\.\.`", page).group(1)
    with registered("my_mixer", LeaksAcrossDocuments, ShortConvOptions), pytest.raises(AssertionError) as err:
        check_mixer("my_mixer")
    assert str(err.value).startswith(quoted + ", max |diff|")
