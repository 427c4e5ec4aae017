"""Generation backends behind one small interface: ``generate(prompts, n, sampling, seed)``.

The transformers backend (CPU or one GPU) serves the toy world and small checks; a vLLM backend
for the cluster plugs in behind the same call.
"""

from __future__ import annotations

from typing import Protocol

import torch

from scout.embedded import lm


class Generator(Protocol):
    def generate(self, prompts: list, n: int, sampling: dict, seed: int) -> list[list[str]]:
        """``n`` completions for each prompt (a string or a chat message list)."""


class TransformersGenerator:
    def __init__(self, model_path: str, device: str = "auto", batch_size: int = 256):
        self.device = lm.pick_device(device)
        self.tok = lm.load_tokenizer(model_path)
        self.model = lm.load_model(model_path, self.device).eval()
        self.batch_size = batch_size

    def generate(self, prompts: list, n: int, sampling: dict, seed: int) -> list[list[str]]:
        ids = [lm.prompt_ids(self.tok, p) for p in prompts for _ in range(n)]
        s = lm.Sampling(sampling["max_new_tokens"], sampling["temperature"], sampling["top_p"])
        g = torch.Generator().manual_seed(seed)
        out: list[str] = []
        for i in range(0, len(ids), self.batch_size):
            chunk = ids[i : i + self.batch_size]
            for r in lm.sample(self.model, chunk, s, self.tok.eos_token_id, self.tok.pad_token_id, g):
                out.append(self.tok.decode([t for t in r if t != self.tok.eos_token_id]))
        return [out[i * n : (i + 1) * n] for i in range(len(prompts))]


def make_generator(model_path: str, engine: str = "transformers", device: str = "auto") -> Generator:
    if engine == "transformers":
        return TransformersGenerator(model_path, device)
    raise ValueError(f"unknown generation engine {engine!r}; expected 'transformers'")
