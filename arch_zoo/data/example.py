"""One tokenized example: what every task yields and the token store's windows turn into.

A leaf (the task docstring in ``tasks/base.py`` says what each objective puts in it), so the
store's readers (``windows.py``) need not import the task registry that imports them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Union

IGNORE = -100  # a label that is not scored (padding, a prompt, an unmasked mlm token)


@dataclass(frozen=True)
class Example:
    input_ids: List[int]
    labels: Union[List[int], int]
    decoder_input_ids: Optional[List[int]] = None
    prompt_ids: Optional[List[int]] = None
    target_ids: Optional[List[int]] = None
    document_ids: Optional[List[int]] = None  # task.documents: separate, the document each input token is of
