"""Moved to ``arch_zoo.trained.restore`` (restoring needs no part of training); this path is kept for
code written against it (a user's, interop's export)."""
from ..trained.restore import Restored, prompt_ids, restore  # noqa: F401
