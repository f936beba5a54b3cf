"""SCAN (Lake & Baroni 2018): navigation commands -> action sequences, generated from the grammar.

Grammar (the paper's Fig. 6 / appendix)::

    C -> S and S | S after S | S
    S -> V twice | V thrice | V
    V -> D[1] opposite D[2] | D[1] around D[2] | D | U
    D -> U left | U right | turn left | turn right
    U -> walk | look | run | jump

which yields 20,910 distinct commands. The interpretation: ``u dir`` turns then acts,
``u opposite dir`` turns twice then acts, ``u around dir`` does (turn, act) four times, ``turn``
contributes no action, ``x twice`` / ``x thrice`` repeat, ``x1 and x2`` runs x1 then x2 and
``x1 after x2`` runs x2 then x1.
"""
from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from typing import Any, List, Literal, Optional, Tuple

from ...registry import component_field
from .base import TASKS
from .common import validate_tokenizer
from .pairs import Pairs, PairTask

ACTIONS = {"walk": "I_WALK", "look": "I_LOOK", "run": "I_RUN", "jump": "I_JUMP"}
TURNS = {"left": "I_TURN_LEFT", "right": "I_TURN_RIGHT"}
REPEATS = {"twice": 2, "thrice": 3}
TEST_FRACTION = 0.2  # the paper's simple split: 80% train, 20% test


def _verb(words: List[str]) -> List[str]:
    """V: ``u``, ``u dir``, ``u opposite dir`` or ``u around dir`` (u may be ``turn`` unless alone)."""
    head, rest = words[0], words[1:]
    if head not in ACTIONS and not (head == "turn" and rest):
        raise ValueError(f"not a SCAN verb phrase: {' '.join(words)!r}")
    act = [ACTIONS[head]] if head in ACTIONS else []
    if not rest:
        return act
    if rest[-1] not in TURNS or len(rest) > 2 or (len(rest) == 2 and rest[0] not in ("opposite", "around")):
        raise ValueError(f"not a SCAN verb phrase: {' '.join(words)!r}")
    turn = [TURNS[rest[-1]]]
    if len(rest) == 1:
        return turn + act
    if rest[0] == "opposite":
        return turn + turn + act
    return (turn + act) * 4


def _sentence(words: List[str]) -> List[str]:
    """S: a verb phrase, optionally followed by twice / thrice."""
    if words and words[-1] in REPEATS:
        return _verb(words[:-1]) * REPEATS[words[-1]]
    if not words:
        raise ValueError("empty SCAN phrase")
    return _verb(words)


def interpret(command: str) -> str:
    """The action sequence of a SCAN command, e.g. 'jump twice after walk left' ->
    'I_TURN_LEFT I_WALK I_JUMP I_JUMP'."""
    words = command.split()
    for conj in ("and", "after"):
        if conj in words:
            i = words.index(conj)
            first, second = _sentence(words[:i]), _sentence(words[i + 1:])
            return " ".join(first + second if conj == "and" else second + first)
    return " ".join(_sentence(words))


@functools.lru_cache(maxsize=1)
def all_commands() -> Tuple[Tuple[str, str], ...]:
    """Every SCAN command with its actions, in a fixed order."""
    units = list(ACTIONS)
    verbs = units + [f"{u} {d}" for u in units + ["turn"] for d in TURNS]
    verbs += [f"{u} {m} {d}" for m in ("opposite", "around") for u in units + ["turn"] for d in TURNS]
    sentences = [f"{v}{r}" for v in verbs for r in ("", " twice", " thrice")]
    commands = sentences + [f"{a} {c} {b}" for c in ("and", "after") for a in sentences for b in sentences]
    return tuple((c, interpret(c)) for c in commands)


def n_actions(actions: str) -> int:
    return len(actions.split())


@dataclass(frozen=True)
class ScanOptions:
    split: Literal["simple", "length"] = "simple"  # simple: random 80/20; length: train short, test long
    max_train_actions: int = 22  # length split: train on action sequences up to this many (the paper: 22)
    val_fraction: float = 0.1  # simple: of the 80% train part; length: of the long (held-out) commands
    tokenizer: Any = component_field("tokenizers", "word")  # a tokenizer name, or {name: bpe, vocab_size: N}

    def __post_init__(self):
        if self.split not in ("simple", "length"):
            raise ValueError(f"split must be 'simple' or 'length', got {self.split!r}")
        longest = max(n_actions(a) for _, a in all_commands())
        if not 1 <= self.max_train_actions < longest:
            raise ValueError(f"max_train_actions must be in 1..{longest - 1}, got {self.max_train_actions}")
        if not 0 < self.val_fraction < 1:
            raise ValueError(f"val_fraction must be in (0, 1), got {self.val_fraction}")
        validate_tokenizer(self.tokenizer)


@TASKS.register("scan", ScanOptions, "SCAN commands -> action sequences (Lake & Baroni 2018)")
class ScanTask(PairTask):
    length_key = "model.max_seq_len"

    @classmethod
    def text_lengths(cls, options, tokenizer) -> Optional[Tuple[int, int]]:
        pairs = all_commands()
        if tokenizer.count_tokens(pairs[0][0]) is None:
            return None
        return (max(tokenizer.count_tokens(c) for c, _ in pairs),
                max(tokenizer.count_tokens(a) for _, a in pairs))

    def pairs(self) -> Pairs:
        o = self.options
        rng = random.Random(self.seed)
        pool = list(all_commands())
        if o.split == "simple":
            rng.shuffle(pool)
            n_test = round(TEST_FRACTION * len(pool))
            test, rest = pool[:n_test], pool[n_test:]
            n_val = max(1, round(o.val_fraction * len(rest)))
            val, train = rest[:n_val], rest[n_val:]
        else:
            train = [p for p in pool if n_actions(p[1]) <= o.max_train_actions]
            held = [p for p in pool if n_actions(p[1]) > o.max_train_actions]
            rng.shuffle(train)
            rng.shuffle(held)
            n_val = max(1, round(o.val_fraction * len(held)))
            val, test = held[:n_val], held[n_val:]
        return {"train": train, "val": val, "test": test}
