import os
import random
import zlib

import numpy as np
import pytest
import torch

os.environ.setdefault("WANDB_MODE", "offline")
# One intra-op thread: the tests' tiny models gain nothing from two, and with any other process on
# the machine two OpenMP threads spin against each other and run ~10x slower. ARCH_ZOO_TEST_THREADS
# sets another count: `make test-cpus` reruns the training-outcome tests with 2, whose float path differs.
torch.set_num_threads(int(os.environ.get("ARCH_ZOO_TEST_THREADS", "1")))


@pytest.fixture(scope="session", autouse=True)
def _token_cache(tmp_path_factory):
    """Token stores the tests prepare go to a temporary cache, never the user's ~/.cache."""
    os.environ["ARCH_ZOO_CACHE"] = str(tmp_path_factory.mktemp("token_cache"))


# Every test starts from a random state fixed by its own node id, whatever ran before it in its worker:
# neither the order of the files nor the worker a file lands on changes an outcome. ARCH_ZOO_TEST_SEED
# shifts every test's seed at once (`make test-order` runs the suite under several shifts), so a test
# that holds only for one draw fails there instead of in 3 CI runs out of 10.
SEED_SHIFT = int(os.environ.get("ARCH_ZOO_TEST_SEED", "0"))


def test_seed(nodeid: str) -> int:
    """The seed a test starts from: a stable hash of its node id (not Python's salted ``hash``), shifted."""
    return (zlib.crc32(nodeid.encode()) + SEED_SHIFT) % 2**31


test_seed.__test__ = False  # a helper, not a test


@pytest.fixture(autouse=True)
def _seeded(request):
    s = test_seed(request.node.nodeid)
    random.seed(s)
    np.random.seed(s)
    torch.manual_seed(s)
    return s


def pytest_addoption(parser):
    parser.addoption("--file-order", default="as-collected",
                     help="run the test files as-collected, reversed, or shuffled[:SEED] (the tests inside "
                          "a file keep their order); make test-order uses it to find order-dependent tests")


def pytest_collection_modifyitems(config, items):
    order = config.getoption("--file-order")
    if order == "as-collected":
        return
    files: dict[str, list] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::")[0], []).append(item)
    names = list(files)
    if order == "reversed":
        names.reverse()
    elif order.startswith("shuffled"):
        random.Random(order.partition(":")[2] or "0").shuffle(names)
    else:
        raise pytest.UsageError(f"--file-order: {order!r} is not one of as-collected, reversed, shuffled[:SEED]")
    items[:] = [item for name in names for item in files[name]]


def tiny(**changes):
    """A tiny model config mapping; tests override what they vary."""
    cfg = {"kind": "decoder", "d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32, "max_seq_len": 32}
    cfg.update(changes)
    return cfg


@pytest.fixture
def seed():
    torch.manual_seed(0)
    return 0


TORCH_ONLY = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {'pytorch_lightning', 'lightning', 'wandb', 'pandas', 'omegaconf'}:
            raise ImportError('blocked ' + name)
sys.meta_path.insert(0, Block())
"""


def run_with_torch_only(code: str):
    """Run ``code`` in a fresh interpreter where Lightning, wandb, pandas and OmegaConf cannot be imported."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", TORCH_ONLY + code], capture_output=True, text=True)


def as_from_a_shell():
    """``preexec_fn`` for a child that a test stops with Ctrl-C: SIGINT (and SIGTERM) at their defaults
    and unblocked, as a shell starts a command, whatever an earlier in-process test left behind in
    this interpreter (a child inherits ignored signals and the blocked-signal mask)."""
    import signal

    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
