"""The two decoding loops: one token per row (greedy or sampled) and beam search.

Both return (tokens, lengths, log_probs, scores) with a hypothesis axis: (B, N, T), (B, N), (B, N),
(B, N). ``log_probs`` are the model's own log-probabilities of the generated tokens (temperature
1, no filtering), so strategies can be compared on one scale. ``tokenizer_size``: ids at or past it
(the padded rows of a published checkpoint's embedding) are never chosen; the log-probabilities
of the ids that are stay the model's, over all its rows, as Hugging Face scores them.
"""
from __future__ import annotations

from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor

from .sampling import within
from .stepper import Stepper

Result = Tuple[Tensor, Tensor, Tensor, Tensor]


def _is_eos(tokens: Tensor, eos: Optional[Tensor]) -> Tensor:
    if eos is None:
        return torch.zeros_like(tokens, dtype=torch.bool)
    return torch.isin(tokens, eos)


def token_by_token(stepper: Stepper, pick: Callable[[Tensor], Tensor], max_new_tokens: int,
                   eos: Optional[Tensor], pad_token_id: int, keep_logits: Optional[List[Tensor]] = None,
                   tokenizer_size: Optional[int] = None) -> Result:
    """Greedy or sampled decoding; a row stops at its first EOS, the batch when every row has."""
    logits = stepper.first()
    batch, device = logits.shape[0], logits.device
    tokens = torch.full((batch, max_new_tokens), pad_token_id, dtype=torch.long, device=device)
    log_probs = torch.zeros(batch, device=device)
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    lengths = torch.zeros(batch, dtype=torch.long, device=device)
    steps = 0
    while True:
        if keep_logits is not None:
            keep_logits.append(logits.float())
        token = pick(within(logits, tokenizer_size))
        chosen = logits.float().log_softmax(-1).gather(-1, token.unsqueeze(-1)).squeeze(-1)
        if eos is not None:  # without EOS every row runs to the end: skip the bookkeeping
            token, chosen = token.masked_fill(finished, pad_token_id), chosen.masked_fill(finished, 0.0)
            lengths += (~finished).long()
            finished |= torch.isin(token, eos)
        log_probs += chosen
        tokens[:, steps] = token
        steps += 1
        if steps == max_new_tokens or (eos is not None and bool(finished.all())):
            break
        logits = stepper.step(token)
    if eos is None:
        lengths.fill_(steps)
    tokens = tokens[:, :steps]
    return tokens.unsqueeze(1), lengths.unsqueeze(1), log_probs.unsqueeze(1), log_probs.unsqueeze(1)


class _Pool:
    """Each prompt's ``k`` best finished hypotheses, best first: scores, log-probs, tokens, lengths."""

    def __init__(self, batch: int, k: int, max_new_tokens: int, pad_token_id: int, device):
        self.k, self.steps = k, max_new_tokens
        self.scores = torch.full((batch, k), float("-inf"), device=device)
        self.logp = torch.full((batch, k), float("-inf"), device=device)
        self.seqs = torch.full((batch, k, max_new_tokens), pad_token_id, dtype=torch.long, device=device)
        self.lens = torch.zeros((batch, k), dtype=torch.long, device=device)

    def add(self, scores: Tensor, logp: Tensor, seqs: Tensor, length: int) -> None:
        """Candidates (B, C) of ``length`` tokens (-inf scores: none) compete with those kept."""
        self.scores, pick = torch.cat((self.scores, scores), dim=1).topk(self.k, dim=1)
        self.logp = torch.cat((self.logp, logp), dim=1).gather(1, pick)
        self.lens = torch.cat((self.lens, torch.full_like(logp, length, dtype=torch.long)), dim=1).gather(1, pick)
        self.seqs = torch.cat((self.seqs, seqs), dim=1).gather(1, pick.unsqueeze(-1).expand(-1, -1, self.steps))

    def add_ended(self, top: Tensor, beam: Tensor, token: Tensor, new: Tensor, seqs: Tensor, t: int,
                  length_penalty: float) -> None:
        """The candidates ``new`` marks (beam ``beam`` + ``token``, ending at step ``t``) join the pool."""
        cand_seqs = seqs.view(beam.shape[0], self.k, -1).gather(1, beam.unsqueeze(-1).expand(-1, -1, self.steps))
        cand_seqs[:, :, t] = token
        self.add((top / (t + 1) ** length_penalty).masked_fill(~new, float("-inf")),
                 top.masked_fill(~new, float("-inf")), cand_seqs, t + 1)

    def beats(self, best_possible: Tensor) -> Tensor:
        """(B,) whether the pool is full and its worst is at least ``best_possible``."""
        worst = self.scores[:, -1]
        return (worst > float("-inf")) & (worst >= best_possible)

    def best(self, n: int) -> Result:
        width = int(self.lens[:, :n].max())
        return self.seqs[:, :n, :width], self.lens[:, :n], self.logp[:, :n], self.scores[:, :n]


def beam_search(stepper: Stepper, beams: int, max_new_tokens: int, eos: Optional[Tensor], pad_token_id: int,
                length_penalty: float, n_best: int, tokenizer_size: Optional[int] = None) -> Result:
    """Beam search ranked by ``log_prob / length ** length_penalty`` (length counts the EOS).

    Each step keeps the ``beams`` best continuations that do not end; a continuation that ends in
    EOS among the top ``beams`` candidates joins the prompt's finished pool (the best ``beams``
    kept). A prompt is done once no running beam can beat the worst of a full pool: its log-prob
    only falls as it grows, so its best possible score is known. The rows of all prompts are
    handled together, with no Python loop over prompts, beams or candidates."""
    logits = stepper.first()  # (B, V): the prompt runs once, then the cache is copied to the beams
    batch, vocab, device = logits.shape[0], logits.shape[-1], logits.device
    k = beams
    stepper.reorder(torch.arange(batch, device=device).repeat_interleave(k))
    log_probs = within(logits.float().log_softmax(-1), tokenizer_size).repeat_interleave(k, 0)  # (B*K, V)
    running = torch.full((batch, k), float("-inf"), device=device)
    running[:, 0] = 0.0  # beams start identical: expand only the first
    seqs = torch.full((batch * k, max_new_tokens), pad_token_id, dtype=torch.long, device=device)
    pool = _Pool(batch, k, max_new_tokens, pad_token_id, device)
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    rows = torch.arange(batch, device=device).unsqueeze(1) * k
    # Each beam can end in any of the EOS ids, so (1 + n_eos) * K candidates always hold K that go on
    # (Hugging Face keeps the same number; with 2K, more than K EOS among them would end the search).
    n_cand = min(max(2, 1 + (0 if eos is None else int(eos.numel()))) * k, k * vocab)
    for t in range(max_new_tokens):
        length = t + 1
        top, flat = (running.view(-1, 1) + log_probs).view(batch, k * vocab).topk(n_cand, dim=1)  # best first
        beam, token = flat // vocab, flat % vocab
        ends = _is_eos(token, eos) & (top > float("-inf"))
        if eos is not None and bool(ends.any()):  # those among the top K join the pool
            ranked = torch.arange(n_cand, device=device) < k
            pool.add_ended(top, beam, token, ends & ranked & ~done.unsqueeze(1), seqs, t, length_penalty)
        running, keep = top.masked_fill(ends, float("-inf")).topk(k, dim=1)
        index = (rows + beam.gather(1, keep)).view(-1)
        seqs = seqs.index_select(0, index)
        seqs[:, t] = token.gather(1, keep).view(-1)
        longest = max_new_tokens if length_penalty > 0 else length  # the length that divides the most
        done |= pool.beats(running[:, 0] / longest ** length_penalty)
        if length == max_new_tokens or bool(done.all()):
            break
        stepper.reorder(index)
        log_probs = within(stepper.step(seqs[:, t]).float().log_softmax(-1), tokenizer_size)
    # Prompts still searching at the end: their running beams compete with the finished ones.
    alive = running.masked_fill(done.unsqueeze(1), float("-inf"))
    pool.add(alive / length ** length_penalty, alive, seqs.view(batch, k, -1), length)
    return pool.best(n_best)
