"""Sampling from the embedded backend's models: a batch decoded token by token with a KV cache
(``Decoder``), temperature and nucleus sampling from logits with one random draw per row and step
(``sample_from_logits``), whole responses (``sample``) and Relay-OPD's rollouts, where the teacher
takes over at reflection points (``relay_sample``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from scout import algorithms as alg
from scout.embedded.lm import attend, left_padded
from scout.embedded.qwen3 import Qwen3


class Decoder:
    """Incremental decoding over a left-padded batch of prompts: ``logits`` holds the next-token
    logits [B, V]; ``step(tokens)`` appends one token per row. At most ``max_new`` steps.

    With ``share``, repeated prompts (a GRPO group, SCOUT's K continuations of one prefix) are
    prefilled once and their cache rows copied: the same logits, bit for bit, as prefilling every
    copy (``tests/train/test_qwen3.py``), for a K-th of the work. A Qwen3 decodes on weights packed at
    construction (:meth:`Qwen3.packed`), so the model must not change while a decoder is in use."""

    def __init__(self, model: torch.nn.Module, prompts: list[list[int]], pad_id: int, max_new: int,
                 share: bool = True):  # fmt: skip
        self.model = model
        device = next(model.parameters()).device
        self.native = isinstance(model, Qwen3)
        distinct = list(dict.fromkeys(map(tuple, prompts)))
        shared = share and self.native and 2 <= len(distinct) < len(prompts)
        ids, mask = left_padded([list(p) for p in distinct] if shared else prompts, pad_id, device)
        width = ids.shape[1]
        pos = (mask.cumsum(-1) - 1).clamp_min(0)
        if self.native:
            self.packed = model.packed()
            self.cache = model.new_cache(len(ids), width + max_new)
            # additive mask over cache positions, as SDPA turns a boolean one into on every call
            self.keys = torch.full((len(ids), width + max_new), float("-inf"), device=device)
            self.keys[:, :width].masked_fill_(mask.bool(), 0.0)
            out = model(ids, pos, attend(mask), self.cache, 0, self.packed)
        else:
            self.keys = mask
            hf = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
            self.cache, out = hf.past_key_values, hf.logits
        self.at = width
        self.next_pos = pos[:, -1] + 1
        self.logits = out[:, -1].float()
        if shared:
            row = {p: i for i, p in enumerate(distinct)}
            self.keep(torch.tensor([row[tuple(p)] for p in prompts], device=device))

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        pos = self.next_pos.unsqueeze(1)
        if self.native:
            self.keys[:, self.at] = 0.0
            keys = self.keys[:, None, None, : self.at + 1]
            out = self.model(tokens.unsqueeze(1), pos, keys, self.cache, self.at, self.packed)
        else:
            self.keys = torch.cat([self.keys, torch.ones_like(self.keys[:, :1])], dim=1)
            hf = self.model(
                input_ids=tokens.unsqueeze(1),
                attention_mask=self.keys,
                position_ids=pos,
                past_key_values=self.cache,
                use_cache=True,
            )
            self.cache, out = hf.past_key_values, hf.logits
        self.at += 1
        self.next_pos = self.next_pos + 1
        self.logits = out[:, -1].float()
        return self.logits

    @property
    def compactable(self) -> bool:
        return self.native

    def keep(self, rows: torch.Tensor) -> None:
        """Go on with these rows: a prefilled row copied for each of its repeats, or finished rows
        dropped. A row's logits then change only by float rounding (a smaller batch may take
        another matmul kernel), so sampling draws from the same distribution with less work."""
        rows = rows.to(self.keys.device)  # the sampler keeps its row bookkeeping on the CPU
        if self.native:  # only the positions written so far are copied; the rest is filled as decoding goes
            self.cache = [(_rows_upto(k, rows, self.at), _rows_upto(v, rows, self.at)) for k, v in self.cache]
        else:
            self.cache = [(k[rows], v[rows]) for k, v in self.cache]
        self.keys, self.next_pos, self.logits = self.keys[rows], self.next_pos[rows], self.logits[rows]


NUCLEUS_FIRST = 16  # tokens looked at first for the nucleus


def _rows_upto(cache: torch.Tensor, rows: torch.Tensor, used: int) -> torch.Tensor:
    """``cache[rows]`` [B, H, T, D] with only the first ``used`` positions copied (the others are
    written before they are read)."""
    out = cache.new_empty((len(rows), *cache.shape[1:]))
    out[:, :, :used] = cache[:, :, :used].index_select(0, rows)
    return out


def sample_from_logits(
    logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator,
    rows: torch.Tensor | None = None, batch: int | None = None,
) -> torch.Tensor:  # fmt: skip
    """One token per row, by inverting the (nucleus-truncated) cumulative distribution at one
    uniform draw per row: one random number a row, where drawing an exponential per vocabulary
    entry (``torch.multinomial``'s method) took a third of the decoding time. With ``rows`` (the
    rows' places in a batch of ``batch`` rows), the draws are those of the whole batch, so a row's
    token does not depend on which rows are still decoded. Nucleus sampling keeps the most
    probable tokens up to and including the first whose cumulative probability reaches
    ``top_p``."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits / temperature, dim=-1)
    u = torch.rand(batch or probs.shape[0], generator=generator)
    if rows is not None:
        u = u[rows.cpu()]
    u = u.to(probs.device)
    if top_p >= 1.0:
        return _invert(probs, u)
    # the nucleus from each row's most probable few where they reach top_p (a sampling model's
    # usual case; several times cheaper than sorting the vocabulary), else from the sorted row
    top, order = probs.topk(min(NUCLEUS_FIRST, probs.shape[-1]), dim=-1)
    tokens = order.gather(-1, _invert(_nucleus(top, top_p), u).unsqueeze(1)).squeeze(1)
    wide = (top.sum(-1) < top_p).nonzero().squeeze(1)
    if len(wide):
        top, order = probs.index_select(0, wide).sort(dim=-1, descending=True)
        picked = _invert(_nucleus(top, top_p), u.index_select(0, wide))
        tokens[wide] = order.gather(-1, picked.unsqueeze(1)).squeeze(1)
    return tokens


def _nucleus(desc: torch.Tensor, top_p: float) -> torch.Tensor:
    """Probabilities sorted in descending order, zeroed past the first that brings the sum to ``top_p``."""
    return desc.masked_fill(desc.cumsum(-1) - desc > top_p, 0.0)


def _invert(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The index of each row's draw ``u`` (uniform in [0, 1)) under the row's (unnormalised)
    distribution: the first index whose cumulative probability exceeds ``u`` times the total. A
    draw that rounds up to the total takes the last index of positive probability, never one of
    probability 0."""
    cum = probs.cumsum(-1)
    target = u.unsqueeze(1) * cum[:, -1:]
    last = probs.shape[1] - 1 - (probs.flip(-1) > 0).int().argmax(-1, keepdim=True)
    return torch.minimum(torch.searchsorted(cum, target, right=True), last).squeeze(1)


@dataclass
class Sampling:
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0


@torch.no_grad()
def sample(
    model: torch.nn.Module,
    prompts: list[list[int]],
    sampling: Sampling,
    eos_id: int,
    pad_id: int,
    generator: torch.Generator,
    max_new_tokens: list[int] | None = None,
    compact: bool = True,
) -> list[list[int]]:
    """Sample one response per prompt; a response ends with EOS or at its token budget
    (``max_new_tokens`` per prompt overrides the common budget, as SCOUT continuations need).
    ``compact`` drops finished rows from the batch as they accumulate: less work, and the same
    responses up to float rounding of the logits (the random draws are per prompt)."""
    n = len(prompts)
    budgets = torch.tensor(max_new_tokens or [sampling.max_new_tokens] * n, dtype=torch.long)
    most = int(budgets.max()) if n else 0
    done = budgets <= 0  # per prompt, on the CPU: the bookkeeping is a few tensor ops a step, not a loop over rows
    length = torch.zeros(n, dtype=torch.long)
    out = torch.zeros((n, max(most, 1)), dtype=torch.long)
    if bool(done.all()):
        return [[] for _ in prompts]
    dec = Decoder(model, prompts, pad_id, most)
    rows = torch.arange(n)  # the prompt each row of the decoder holds
    for _ in range(most):
        tok = sample_from_logits(dec.logits, sampling.temperature, sampling.top_p, generator, rows, n)
        drawn = tok.cpu()
        live = ~done[rows]  # rows whose prompt still takes tokens
        at, t = rows[live], drawn[live]
        out[at, length[at]] = t
        length[at] += 1
        done[at] = (t == eos_id) | (length[at] >= budgets[at])
        if bool(done.all()):
            break
        finished = done[rows]
        alive = (~finished).nonzero().squeeze(1)
        if compact and dec.compactable and len(alive) <= 0.75 * len(rows):
            keep = alive if len(alive) >= 2 else torch.cat([alive, finished.nonzero().squeeze(1)[:1]])
            dec.keep(keep)
            rows, tok, finished = rows[keep], tok[keep.to(tok.device)], finished[keep]
        dec.step(torch.where(finished.to(tok.device), torch.full_like(tok, pad_id), tok))
    return [row[:k] for row, k in zip(out.tolist(), length.tolist(), strict=True)]


@dataclass
class RelayResult:
    responses: list[list[int]]
    teacher_owned: list[list[int]] = field(default_factory=list)
    triggers: int = 0


def vocab_flags(tokenizer, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token tables: is it a reflection word, does it contain a blank line."""
    words = alg.reflection_variants()
    reflect = torch.zeros(size, dtype=torch.bool)
    blank = torch.zeros(size, dtype=torch.bool)
    for i in range(min(size, len(tokenizer))):
        text = tokenizer.decode([i])
        reflect[i] = text in words
        blank[i] = "\n\n" in text
    return reflect, blank


@torch.no_grad()
def relay_sample(
    student: torch.nn.Module,
    teacher: torch.nn.Module,
    prompts: list[list[int]],
    sampling: Sampling,
    cfg: alg.RelayConfig,
    reflect: torch.Tensor,
    blank: torch.Tensor,
    eos_id: int,
    pad_id: int,
    generator: torch.Generator,
) -> RelayResult:
    """Student rollout in which the teacher takes over at reflection points (Relay-OPD). Each row's
    state (in a teacher leg or not, legs so far, the leg's tokens and paragraphs) is a tensor, so a
    step is a few tensor ops whatever the batch."""
    n = len(prompts)
    sdec = Decoder(student, prompts, pad_id, sampling.max_new_tokens)
    tdec = Decoder(teacher, prompts, pad_id, sampling.max_new_tokens)
    zeros = torch.zeros(n, dtype=torch.long)
    done, mode = torch.zeros(n, dtype=torch.bool), torch.zeros(n, dtype=torch.bool)
    legs, leg_tokens, paragraphs, length = zeros.clone(), zeros.clone(), zeros.clone(), zeros.clone()
    out = torch.zeros((n, max(sampling.max_new_tokens, 1)), dtype=torch.long)
    owner = torch.zeros_like(out)
    triggers = 0
    for _ in range(sampling.max_new_tokens):
        s_tok = sample_from_logits(sdec.logits, sampling.temperature, sampling.top_p, generator).cpu()
        t_tok = sample_from_logits(tdec.logits, sampling.temperature, sampling.top_p, generator).cpu()
        t_arg = tdec.logits.argmax(-1).cpu()
        s_top = sdec.logits.topk(min(cfg.student_topk, sdec.logits.shape[-1]), dim=-1).indices.cpu()
        fire = alg.relay_trigger(t_arg, s_tok, s_top, reflect)
        live = ~done
        start = live & ~mode & fire & (legs < cfg.max_legs)  # the teacher takes over with its argmax
        tok = torch.where(mode, t_tok, torch.where(start, t_arg, s_tok))
        triggers += int(start.sum())
        mode = mode | start
        leg_tokens, paragraphs = leg_tokens.masked_fill(start, 0), paragraphs.masked_fill(start, 0)
        at = live.nonzero().squeeze(1)
        out[at, length[at]] = tok[at]
        owner[at, length[at]] = (mode & live)[at].long()
        length[at] += 1
        leg = live & mode
        leg_tokens, paragraphs = leg_tokens + leg.long(), paragraphs + (leg & blank[tok]).long()
        ended = leg & alg.relay_leg_done(paragraphs, leg_tokens, cfg.max_paragraphs, cfg.max_leg_tokens)
        mode, legs = mode & ~ended, legs + ended.long()
        done = done | (ended & (legs >= cfg.max_legs)) | (live & (tok == eos_id))
        if bool(done.all()):
            break
        step = torch.where(live, tok, torch.full_like(tok, pad_id)).to(sdec.logits.device)
        sdec.step(step)
        tdec.step(step)
    k = length.tolist()
    res = RelayResult([r[:m] for r, m in zip(out.tolist(), k, strict=True)],
                      [r[:m] for r, m in zip(owner.tolist(), k, strict=True)], triggers)  # fmt: skip
    return res
