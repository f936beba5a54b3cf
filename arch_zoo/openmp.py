"""OpenMP's wait policy for processes that train: threads that sleep while they wait.

Spinning OpenMP threads that share cores with anything else -- another worker, a sweep's
coordinator, a neighbour's job -- were measured 10-20x slower on a 2-core machine; sleeping ones
cost a few percent when the machine is idle. libgomp reads the variable once, when it loads (with
torch), so it must be set before torch is imported in the process that trains, or in its parent."""
from __future__ import annotations

import os

VARIABLE = "OMP_WAIT_POLICY"


def passive_unless_chosen() -> bool:
    """Set OMP_WAIT_POLICY=PASSIVE unless the user set it; True when this call set it."""
    if VARIABLE in os.environ:
        return False
    os.environ[VARIABLE] = "PASSIVE"
    return True
