"""Built-in tasks. Importing this package registers all of them in ``TASKS``."""
from .base import TASKS, Example, Task, TaskData  # noqa: F401

from . import corpus, dyck, scan, synthetic  # noqa: F401  (registers char_lm, mlm, dyck, dyck_depth, scan, copy...)
from . import recall, sequence_probes  # noqa: F401  (the MAD probes and Zoology's mqar)
