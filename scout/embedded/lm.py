"""Causal-LM plumbing for the embedded backend: loading, incremental sampling, Relay rollouts and
per-token log-probs. Plain torch, so it runs on the CPU or one GPU alike.

Qwen3-architecture checkpoints (every toy model, and Qwen3 itself) run on ``scout.embedded.qwen3``,
a plain-torch implementation with a preallocated KV cache; any other architecture runs on
transformers' ``AutoModelForCausalLM`` behind the same two calls, :func:`score` and
:func:`decoder`. Tokenizer folders with a ``tokenizer.json`` are read by
``scout.embedded.tokenizer`` (no transformers import, so a toy job starts in about 2 s).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path

import torch

from scout import algorithms as alg
from scout.embedded.qwen3 import Qwen3, is_qwen3
from scout.embedded.tokenizer import Tokenizer
from scout.io import DamagedInput


def pick_device(requested: str = "auto") -> torch.device:
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(requested)


def load_model(path: str | Path, device: torch.device) -> torch.nn.Module:
    """A causal LM from a Hugging Face folder; a local folder that cannot be read is named as a
    damaged input, with the command that remakes it."""
    try:
        if is_qwen3(path):
            return Qwen3.from_pretrained(path, device)
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    except Exception as exc:
        if not Path(path).exists():
            raise
        weights = next(iter(sorted(Path(path).glob("*.safetensors"))), Path(path))
        raise DamagedInput(weights, f"the model cannot be loaded ({type(exc).__name__}: {exc})") from exc
    return model.to(device)


def load_tokenizer(path: str | Path):
    if (Path(path) / "tokenizer.json").exists():
        return Tokenizer(path)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


def prompt_ids(tokenizer, prompt: str | list[dict], chat: dict | None = None) -> list[int]:
    """Token ids of a prompt rendered with the model's own chat template and its ``chat`` options
    (e.g. ``enable_thinking: false``)."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **(chat or {}))
    return tokenizer.encode(text, add_special_tokens=False)


def _attend(keys: torch.Tensor) -> torch.Tensor:
    """Boolean [B, 1, T, T] mask: causal, padded keys hidden; a query always sees itself (so rows
    of padding stay finite)."""
    t = keys.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool, device=keys.device).tril()
    eye = torch.eye(t, dtype=torch.bool, device=keys.device)
    return ((causal & keys.bool()[:, None, :]) | eye)[:, None]


def score(model: torch.nn.Module, ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
    """Logits [B, T, V] of right-padded sequences (positions past a row's end are garbage)."""
    if isinstance(model, Qwen3):
        positions = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
        packed = None if torch.is_grad_enabled() else model.packed()
        return model(ids, positions, None, packed=packed).float()
    return model(input_ids=ids, attention_mask=attention).logits.float()


def padded(rows: list[list[int]], width: int, fill: int, left: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Token rows as one [B, width] tensor (``fill`` elsewhere), right- or left-aligned, and its
    boolean mask, on the CPU: one tensor from the concatenated rows, not one per row (the caller
    moves both to its device in one copy each)."""
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
    cols = torch.arange(width)
    mask = cols >= (width - lengths)[:, None] if left else cols < lengths[:, None]
    ids = torch.full((len(rows), width), fill, dtype=torch.long)
    ids[mask] = torch.tensor(list(chain.from_iterable(rows)), dtype=torch.long)
    return ids, mask


def _left_padded(prompts: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    ids, mask = padded(prompts, max(len(p) for p in prompts), pad_id, left=True)
    return ids.to(device), mask.long().to(device)


class Decoder:
    """Incremental decoding over a left-padded batch of prompts: ``logits`` holds the next-token
    logits [B, V]; ``step(tokens)`` appends one token per row. At most ``max_new`` steps.

    With ``share``, repeated prompts (a GRPO group, SCOUT's K continuations of one prefix) are
    prefilled once and their cache rows copied: the same logits, bit for bit, as prefilling every
    copy (``tests/test_qwen3.py``), for a K-th of the work. A Qwen3 decodes on weights packed at
    construction (:meth:`Qwen3.packed`), so the model must not change while a decoder is in use."""

    def __init__(self, model: torch.nn.Module, prompts: list[list[int]], pad_id: int, max_new: int,
                 share: bool = True):  # fmt: skip
        self.model = model
        device = next(model.parameters()).device
        self.native = isinstance(model, Qwen3)
        distinct = list(dict.fromkeys(map(tuple, prompts)))
        shared = share and self.native and 2 <= len(distinct) < len(prompts)
        ids, mask = _left_padded([list(p) for p in distinct] if shared else prompts, pad_id, device)
        width = ids.shape[1]
        pos = (mask.cumsum(-1) - 1).clamp_min(0)
        if self.native:
            self.packed = model.packed()
            self.cache = model.new_cache(len(ids), width + max_new)
            # additive mask over cache positions, as SDPA turns a boolean one into on every call
            self.keys = torch.full((len(ids), width + max_new), float("-inf"), device=device)
            self.keys[:, :width].masked_fill_(mask.bool(), 0.0)
            out = model(ids, pos, _attend(mask), self.cache, 0, self.packed)
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


def pad_batch(
    prompts: list[list[int]], responses: list[list[int]], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Right-padded prompt+response ids, attention mask, response mask [B, T] and the response
    offset: response token j of row i sits at input position len(prompt_i) + j."""
    seqs = [p + r for p, r in zip(prompts, responses, strict=True)]
    t_max = max(1, max(len(r) for r in responses))
    ids, att = padded(seqs, max(len(q) for q in seqs), pad_id)
    rmask = (torch.arange(t_max) < torch.tensor([len(r) for r in responses])[:, None]).float()
    return ids.to(device), att.long().to(device), rmask.to(device), t_max


def response_logits(
    model: torch.nn.Module, prompts: list[list[int]], responses: list[list[int]], pad_id: int,
    chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """Logits predicting each response token [B, T, V], the tokens [B, T] and the mask [B, T].

    With ``chunk``, the rows are computed ``chunk`` at a time, sorted by length, each chunk padded
    to its own longest row: the same values up to float rounding for less padding (logits past a
    row's end are 0 there, garbage otherwise: the mask excludes them either way)."""
    if chunk is not None and len(prompts) > chunk:
        return _chunked_logits(model, prompts, responses, pad_id, chunk)
    device = next(model.parameters()).device
    ids, att, rmask, t_max = pad_batch(prompts, responses, pad_id, device)
    logits = score(model, ids, att)
    starts = torch.tensor([len(p) - 1 for p in prompts])[:, None]  # the position predicting response token 0
    idx = (starts + torch.arange(t_max)).clamp(max=ids.shape[1] - 1).to(device)
    gathered = logits.gather(1, idx.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
    tokens = padded(responses, t_max, 0)[0].to(device)
    return gathered, tokens, rmask


def _chunked_logits(model, prompts, responses, pad_id, chunk):
    t_max = max(1, max(len(r) for r in responses))

    def part(idx):
        got = response_logits(model, [prompts[i] for i in idx], [responses[i] for i in idx], pad_id)
        return [_widen(x, t_max) for x in got]

    parts = list(zip(*[part(idx) for idx in _by_length(prompts, responses, chunk)], strict=True))
    inverse = _inverse(prompts, responses, parts[0][0].device)
    return tuple(torch.cat(xs).index_select(0, inverse) for xs in parts)


def _by_length(prompts: list[list[int]], responses: list[list[int]], chunk: int) -> list[list[int]]:
    """Row indices in chunks of ``chunk``, sorted by total length (a chunk pads to its longest)."""
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]) + len(responses[i]))
    return [order[start : start + chunk] for start in range(0, len(order), chunk)]


def _inverse(prompts: list[list[int]], responses: list[list[int]], device) -> torch.Tensor:
    """Where each row landed in :func:`_by_length`'s order, to put the chunks' rows back."""
    order = [i for idx in _by_length(prompts, responses, len(prompts)) for i in idx]
    inverse = torch.empty(len(order), dtype=torch.long)
    inverse[torch.tensor(order)] = torch.arange(len(order))
    return inverse.to(device)


def _widen(x: torch.Tensor, width: int) -> torch.Tensor:
    """``x`` [B, T, ...] padded with zeros to ``width`` along T."""
    return torch.nn.functional.pad(x, (0, 0) * (x.dim() - 2) + (0, width - x.shape[1]))


def token_logp(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def response_logp(
    model: torch.nn.Module, prompts: list[list[int]], responses: list[list[int]], pad_id: int, chunk: int = 32
) -> torch.Tensor:
    """Log-probs of each response token [B, T] (T the longest response; 0 past a row's end),
    computed over chunks of sequences of similar length: a batch of continuations from prefixes of
    every length pads far less that way. Differentiable, for one backward pass over the batch."""
    t_max = max(1, max(len(r) for r in responses))
    parts = []
    for idx in _by_length(prompts, responses, chunk):
        logits, tokens, mask = response_logits(model, [prompts[i] for i in idx], [responses[i] for i in idx], pad_id)
        parts.append(_widen(token_logp(logits, tokens) * mask, t_max))
    return torch.cat(parts).index_select(0, _inverse(prompts, responses, parts[0].device))


def continuation_logp(
    model: torch.nn.Module, prefixes: list[list[int]], continuations: list[list[int]], group: int, pad_id: int,
    chunk: int = 32,
) -> torch.Tensor:  # fmt: skip
    """Log-probs [B, C] of each continuation token (0 past a row's end), continuation ``i`` following
    ``prefixes[i // group]``: what ``response_logp`` gives for the prefixes repeated ``group`` times.

    SCOUT's K continuations of one prompt + student prefix share their first tokens. A Qwen3
    computes every prefix once, with gradients, into a cache; the continuations, ``chunk`` at a
    time sorted by length (little padding), attend to their prefix's keys and values. Scoring full
    sequences computes every prefix K times. Differentiable, for one backward pass over the batch."""
    if len(continuations) != group * len(prefixes):
        raise ValueError(f"{len(continuations)} continuations for {len(prefixes)} prefixes x {group}")
    if not isinstance(model, Qwen3):
        return response_logp(model, [p for p in prefixes for _ in range(group)], continuations, pad_id)
    device = next(model.parameters()).device
    packed = None if torch.is_grad_enabled() else model.packed()
    lens = torch.tensor([len(p) for p in prefixes], device=device)
    ids = padded(prefixes, int(lens.max()), pad_id)[0]
    cache = model.new_cache(*ids.shape)
    positions = torch.arange(ids.shape[1], device=device).expand_as(ids)
    logits = model(ids.to(device), positions, None, cache, 0, packed)  # right-padded: causal attention
    last = logits[torch.arange(len(prefixes), device=device), lens - 1]  # predicts each first continuation token
    width = max(1, max(map(len, continuations)))
    order = sorted(range(len(continuations)), key=lambda i: len(continuations[i]))
    parts = []
    for start in range(0, len(order), chunk):
        rows = order[start : start + chunk]
        owner = torch.tensor([i // group for i in rows], device=device)
        lp = _continuations_of(
            model, cache, owner, lens[owner], last[owner], [continuations[i] for i in rows], pad_id, packed
        )
        parts.append(torch.nn.functional.pad(lp, (0, width - lp.shape[1])))
    inverse = torch.empty(len(order), dtype=torch.long)
    inverse[torch.tensor(order)] = torch.arange(len(order))
    return torch.cat(parts).index_select(0, inverse.to(device))


def _continuations_of(model: Qwen3, cache, owner, lens, last, continuations, pad_id, packed) -> torch.Tensor:
    """One chunk of :func:`continuation_logp`: each continuation is written after its prefix's cache
    rows, at its own positions (prefix length + j), and sees the valid part of its prefix and
    itself causally. ``owner``, ``lens`` and ``last``: its prefix's index, length and last logits."""
    device, n = lens.device, len(continuations)
    reach = int(lens.max())  # prefix positions any row of the chunk can see
    width = max(1, max(map(len, continuations)))
    tokens, valid = padded(continuations, width, pad_id)
    tokens, valid = tokens.to(device), valid.float().to(device)
    seen = (torch.arange(reach, device=device) < lens[:, None])[:, None, :].expand(-1, width, -1)
    causal = torch.ones(width, width, dtype=torch.bool, device=device).tril().expand(n, -1, -1)
    mask = torch.cat([seen, causal], dim=-1)[:, None]
    tail = [(_gathered(k, owner, reach, width), _gathered(v, owner, reach, width)) for k, v in cache]
    out = model(tokens, lens[:, None] + torch.arange(width, device=device), mask, tail, reach, packed)
    pred = torch.cat([last[:, None], out[:, :-1]], dim=1).float()
    return token_logp(pred, tokens) * valid


def _gathered(cache: torch.Tensor, rows: torch.Tensor, reach: int, extra: int) -> torch.Tensor:
    """Rows of a prefix cache [G, H, P, D], cut to ``reach`` positions, with room for ``extra`` more."""
    picked = cache[:, :, :reach].index_select(0, rows)
    return torch.cat([picked, picked.new_zeros(*picked.shape[:2], extra, picked.shape[3])], dim=2)
