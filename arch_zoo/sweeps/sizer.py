"""What the plan needs to know about a config before anything trains: its vocabulary and validation
metrics (building each distinct task's data once), its parameter counts and FLOPs per token (building
each distinct model once, at the lengths its task trains at)."""
from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..config import ExperimentConfig
from ..coerce import to_dict
from ..config.kinds import kind_of
from ..data.lengths import split_lengths
from ..errors import ConfigError
from .costs import tokens_per_step


class Sizer:
    """Parameter counts, building each distinct task's data once (for its vocabulary) and each
    distinct model once."""

    def __init__(self):
        self.vocab: Dict[str, int] = {}
        self.data: Dict[str, Any] = {}  # the TaskData behind each vocabulary
        self.counts: Dict[Tuple[str, int, str], Tuple[int, float, int]] = {}
        self.shapes: Dict[Tuple[str, int, str], Tuple[int, int]] = {}  # shape_counts: (total, non-embedding)
        self.split_lengths: Dict[str, Tuple[Dict[Tuple[int, int], int], Dict[str, Any]]] = {}

    def vocab_size(self, cfg: ExperimentConfig, blame: Callable[[ConfigError], ConfigError]) -> int:
        if cfg.model.vocab_size is not None and cfg.task is None:
            return cfg.model.vocab_size
        key = self._key(cfg)
        if key not in self.vocab:
            from ..training.run import prepare

            try:
                self.data[key] = prepare(cfg)
            except ConfigError as exc:
                raise blame(exc) from None
            self.vocab[key] = self.data[key].tokenizer.vocab_size
        return self.vocab[key]

    def val_metrics(self, cfg: ExperimentConfig, blame) -> List[str]:
        """The validation metrics a run of ``cfg`` logs (as the training module names them)."""
        from ..training import objectives

        self.vocab_size(cfg, blame)
        data = self.data.get(self._key(cfg))
        if data is None:  # no task: nothing to validate on
            return []
        cpt = data.info.get("chars_per_token") or {}
        task_objective = objectives.objective(data.objective)
        out = [f"{split}/{name}" for split in data.eval_splits
               for name in task_objective.metric_names(cpt.get(split.split("@")[0], 0.0), data.token_bytes is not None)]
        if "exact_match" in data.metrics and cfg.train.exact_match_samples > 0:
            out.append("val/exact_match")
        return out

    @staticmethod
    def _key(cfg: ExperimentConfig) -> str:
        return json.dumps([to_dict(cfg.task), cfg.seed, cfg.model.kind, cfg.model.max_seq_len,
                           to_dict(cfg.model.head), cfg.model.vocab_size], sort_keys=True, default=str)

    def count(self, cfg: ExperimentConfig, blame: Callable[[ConfigError], ConfigError]) -> int:
        return self._measure(cfg, blame)[0]

    def flops_per_token(self, cfg: ExperimentConfig, blame: Callable[[ConfigError], ConfigError]) -> float:
        """Forward FLOPs per token at the lengths trained, as summary.json counts them."""
        return self._measure(cfg, blame)[1]

    def lengths(self, cfg: ExperimentConfig, blame) -> Tuple[Dict[Tuple[int, int], int], Dict[str, Any]]:
        """The lengths a run of ``cfg`` trains at, and what run.json says about them: its task's train
        split, every example at its own length; without a task, ``model.max_seq_len``."""
        self.vocab_size(cfg, blame)
        key = self._key(cfg)
        if key not in self.split_lengths:
            data = self.data.get(key)
            seq2seq = kind_of(cfg.model).cross_attention  # a source and a target
            if data is None:
                n = cfg.model.max_seq_len
                self.split_lengths[key] = ({(n, n if seq2seq else 0): 1},
                                           {"lengths": f"model.max_seq_len ({n}): no task"})
            else:
                train = split_lengths(data.splits["train"])
                self.split_lengths[key] = (train.counts, train.record("train", seq2seq))
        return self.split_lengths[key]

    def tokens_per_example(self, cfg: ExperimentConfig, blame) -> float:
        counts, _ = self.lengths(cfg, blame)
        return sum(n * (a + b) for (a, b), n in counts.items()) / sum(counts.values())

    def bytes_per_token(self, cfg: ExperimentConfig, blame, split: str = "train") -> Optional[float]:
        """UTF-8 bytes of text per token of a split of ``cfg``'s task, as its store measures them (None:
        no text, or a tokenizer whose tokens' bytes are unknown)."""
        self.vocab_size(cfg, blame)
        data = self.data.get(self._key(cfg))
        return ((data.info.get("bytes_per_token") or {}) if data is not None else {}).get(split)

    def non_embedding(self, cfg: ExperimentConfig, blame: Callable[[ConfigError], ConfigError]) -> int:
        """Parameters less the token and position embeddings (``summary.non_embedding_parameters``)."""
        return self._measure(cfg, blame)[2]

    def tokens_per_step(self, cfg: ExperimentConfig, blame) -> float:
        """Real training tokens per optimizer step at the lengths ``cfg`` trains at."""
        return tokens_per_step(cfg, self.tokens_per_example(cfg, blame))

    def shape_counts(self, cfg: ExperimentConfig, blame) -> Tuple[int, int]:
        """(total, non-embedding) parameters, counted on a model built on the meta device: no memory and
        no init, so a parameter rule can try widths of any size (a component that cannot build there is
        built for real)."""
        vocab = self.vocab_size(cfg, blame)
        key = (json.dumps(to_dict(cfg.model), sort_keys=True, default=str), vocab, self._key(cfg))
        if key in self.counts:
            return self.counts[key][0], self.counts[key][2]
        if key not in self.shapes:
            import torch

            from ..models import build_model
            from ..models.summary import count_parameters, non_embedding_parameters

            with torch.random.fork_rng(devices=[]):
                try:
                    with torch.device("meta"):
                        model = build_model(cfg, vocab)
                except (NotImplementedError, RuntimeError):
                    model = build_model(cfg, vocab)
            self.shapes[key] = (count_parameters(model), non_embedding_parameters(model))
        return self.shapes[key]

    def _measure(self, cfg: ExperimentConfig, blame) -> Tuple[int, float, int]:
        vocab = self.vocab_size(cfg, blame)
        key = (json.dumps(to_dict(cfg.model), sort_keys=True, default=str), vocab, self._key(cfg))
        if key not in self.counts:
            import torch

            from ..models import build_model
            from ..models.flops import FlopCounter
            from ..models.summary import count_parameters, non_embedding_parameters

            with torch.random.fork_rng(devices=[]):  # counting must not move anyone's random state
                model = build_model(cfg, vocab)
            per_token = FlopCounter(model).per_token(self.lengths(cfg, blame)[0])["total"]
            self.counts[key] = (count_parameters(model), per_token, non_embedding_parameters(model))
        return self.counts[key]
