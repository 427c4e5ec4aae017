"""Causal-LM plumbing for the embedded backend: loading, incremental sampling, Relay rollouts and
per-token log-probs. Plain torch, so it runs on the CPU or one GPU alike.

Qwen3-architecture checkpoints (every toy model, and Qwen3 itself) run on ``scout.embedded.qwen3``,
a plain-torch implementation with a preallocated KV cache; any other architecture runs on
transformers' ``AutoModelForCausalLM`` behind the same two calls, :func:`score` and
:func:`decoder`. Tokenizer folders with a ``tokenizer.json`` are read by
``scout.embedded.tokenizer`` (no transformers import, so a toy job starts in about 2 s).
"""

from __future__ import annotations

from itertools import chain
from pathlib import Path

import torch

from scout.embedded.qwen3 import Qwen3, is_qwen3
from scout.embedded.tokenizer import Tokenizer
from scout.io import DamagedInput, JobStopped


def pick_device(requested: str = "auto") -> torch.device:
    """The config's device; a GPU asked for where torch sees none is the config's mistake, said so
    (loading a model there failed as if its file were damaged, and named a remake of it)."""
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(requested)
    if device.type == "cuda" and not torch.cuda.is_available():
        why = "this torch is built without CUDA" if torch.version.cuda is None else "no GPU is visible to it"
        raise JobStopped(f"device: {requested}, but torch {torch.__version__} cannot use a GPU here ({why}); "
                         "set device: cpu (or auto) in the config, or run this job where there is a GPU")  # fmt: skip
    return device


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


def attend(keys: torch.Tensor) -> torch.Tensor:
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


def left_padded(prompts: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    ids, mask = padded(prompts, max(len(p) for p in prompts), pad_id, left=True)
    return ids.to(device), mask.long().to(device)


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
