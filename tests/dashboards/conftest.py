"""A synthetic sweep (tests/reports/sweeps.py) with one failed and one pending run: what every
dashboard test exports and serves."""
import pytest

from tests.reports.sweeps import write_sweep

FINISHED = {"sinusoidal-s0", "sinusoidal-s1", "sinusoidal-s2", "sinusoidal-s3", "rope-s0", "rope-s1",
            "alibi-s0", "alibi-s1", "alibi-s2", "alibi-s3"}  # alibi-s3 diverged: it has a summary
MISSING = [("rope-s2", "failed"), ("rope-s3", "pending")]


def partial_sweep(root):
    return write_sweep(root, pending=[("rope", 3)])


@pytest.fixture
def sweep(tmp_path):
    return partial_sweep(tmp_path / "pos")
