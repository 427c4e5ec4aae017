"""The Qwen3 architecture in plain torch, reading and writing Hugging Face's files for it.

Why not transformers' ``Qwen3ForCausalLM``: for the toy world's models (0.1-0.3 M parameters)
its per-call machinery (mask builders, cache objects, output classes) costs several times the
arithmetic, and importing it costs about 3 s in every job. This module computes the same function
(``tests/train/test_qwen3.py`` holds its logits equal to transformers' on the same weights, and has
transformers load what it saves), with a preallocated KV cache for sampling.

Parameter names follow Hugging Face's (``model.layers.0.self_attn.q_proj.weight``, ...), so
``config.json`` + ``model.safetensors`` written here are an ordinary Qwen3 checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

WEIGHTS = "model.safetensors"


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:
            return F.rms_norm(x, x.shape[-1:], self.weight, self.eps)
        return self.scaled(x, self.weight)

    def scaled(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """The norm with another (broadcast) weight: ``rms_norm`` multiplies by its weight last, so
        this equals :meth:`forward` bit for bit where ``weight`` holds this norm's."""
        return weight * F.rms_norm(x.float(), x.shape[-1:], eps=self.eps).to(x.dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding, half-split layout (Hugging Face's ``x * cos + rotate_half(x) * sin``), with
    ``sin`` from :meth:`Qwen3.rope`: its first half negated, which carries ``rotate_half``'s sign.
    Negation is exact, so this is the same arithmetic with one kernel fewer."""
    return x * cos + x.roll(x.shape[-1] // 2, -1) * sin


class Packed(NamedTuple):
    """One layer's weights concatenated for inference: q, k, v projections as one matrix, gate and
    up as one, and the q and k norms' weights per head. Each output element is the same dot
    product as with the separate matrices (``tests/train/test_qwen3.py`` holds the logits bit-equal), for
    fewer, larger kernels. Not for training: autograd would sum the input's gradient in another order."""

    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    qk_norm: torch.Tensor
    gate_up: torch.Tensor


class Attention(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        d, bias = c["hidden_size"], c.get("attention_bias", False)
        self.q_proj = nn.Linear(d, self.heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(d, self.kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(d, self.kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, d, bias=bias)
        self.q_norm = RMSNorm(self.head_dim, c["rms_norm_eps"])
        self.k_norm = RMSNorm(self.head_dim, c["rms_norm_eps"])

    def forward(self, x, cos, sin, mask, cache=None, at: int = 0, packed: Packed | None = None):
        b, t, _ = x.shape
        h, kv, d = self.heads, self.kv_heads, self.head_dim
        if packed is None:
            q = self.q_norm(self.q_proj(x).view(b, t, h, d)).transpose(1, 2)
            k = self.k_norm(self.k_proj(x).view(b, t, kv, d)).transpose(1, 2)
            v = self.v_proj(x).view(b, t, kv, d).transpose(1, 2)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        else:
            qkv = F.linear(x, packed.qkv, packed.qkv_bias).view(b, t, h + 2 * kv, d)
            qk = rotate(self.q_norm.scaled(qkv[:, :, : h + kv], packed.qk_norm).transpose(1, 2), cos, sin)
            q, k, v = qk[:, :h], qk[:, h:], qkv[:, :, h + kv :].transpose(1, 2)
        if cache is not None:
            keys, values = cache
            keys[:, :, at : at + t] = k
            values[:, :, at : at + t] = v
            k, v = keys[:, :, : at + t], values[:, :, : at + t]
        gqa = self.heads != self.kv_heads
        if mask is None:  # right-padded full sequences: causal attention never reaches a pad key
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        d, i = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(d, i, bias=False)
        self.up_proj = nn.Linear(d, i, bias=False)
        self.down_proj = nn.Linear(i, d, bias=False)

    def forward(self, x, packed: Packed | None = None):
        if packed is None:
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        gate, up = F.linear(x, packed.gate_up).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


def applied_weight(linear: nn.Module) -> torch.Tensor:
    """The weight a projection's forward applies. A LoRA-wrapped one (peft's layer: the plain
    linear map is its ``base_layer``) adds its active adapters' update unless they are switched off
    or already merged, so packed inference computes the adapted model, as the modules do."""
    base = getattr(linear, "base_layer", None)
    if base is None:
        return linear.weight
    if linear.disable_adapters or linear.merged:
        return base.weight
    return base.weight + sum(linear.get_delta_weight(name) for name in linear.active_adapters)


class Layer(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = MLP(c)
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])

    def forward(self, x, cos, sin, mask, cache=None, at: int = 0, packed: Packed | None = None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache, at, packed)
        return x + self.mlp(self.post_attention_layernorm(x), packed)

    @torch.no_grad()
    def packed(self) -> Packed:
        a, m = self.self_attn, self.mlp
        biases = [p.bias for p in (a.q_proj, a.k_proj, a.v_proj)]
        norms = [a.q_norm.weight] * a.heads + [a.k_norm.weight] * a.kv_heads
        return Packed(
            qkv=torch.cat([applied_weight(a.q_proj), applied_weight(a.k_proj), applied_weight(a.v_proj)]),
            qkv_bias=None if biases[0] is None else torch.cat(biases),
            qk_norm=torch.stack(norms),
            gate_up=torch.cat([applied_weight(m.gate_proj), applied_weight(m.up_proj)]),
        )


class Body(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class Qwen3(nn.Module):
    """``forward(ids, positions, mask)`` -> logits; ``mask`` is a boolean [B, 1, Tq, Tk] (True =
    attend), or None for causal attention over right-padded sequences. With ``cache`` (from :meth:`new_cache`) the keys and values of ``ids`` are written at
    cache positions ``at ...`` and the queries attend to cache positions ``0 .. at + len(ids)``."""

    def __init__(self, config: dict):
        super().__init__()
        if config.get("model_type") != "qwen3":
            raise ValueError(f"not a Qwen3 config (model_type {config.get('model_type')!r})")
        self.config = dict(config)
        self.config.setdefault("head_dim", config["hidden_size"] // config["num_attention_heads"])
        c = self.config
        self.model = Body(c)
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        if c.get("tie_word_embeddings", False):
            self.lm_head.weight = self.model.embed_tokens.weight
        theta = (c.get("rope_parameters") or {}).get("rope_theta", c.get("rope_theta", 10000.0))
        dim = c["head_dim"]
        inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("rope_cos", torch.empty(0, dim), persistent=False)
        self.register_buffer("rope_sin", torch.empty(0, dim), persistent=False)

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None, cache=None, at: int = 0,
                packed: list[Packed] | None = None):  # fmt: skip
        x = self.model.embed_tokens(ids)
        cos, sin = self.rope(positions, at + ids.shape[1])
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        for i, layer in enumerate(self.model.layers):
            x = layer(x, cos, sin, mask, None if cache is None else cache[i], at, None if packed is None else packed[i])
        return self.lm_head(self.model.norm(x))

    def rope(self, positions: torch.Tensor, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [B, 1, T, head_dim] for :func:`rotate` at ``positions`` (all below ``end``),
        read from tables grown as needed. The tables hold what computing the angles per call gives
        (the same elementwise kernels on the same values), without those kernels on every call."""
        if len(self.rope_cos) < end:
            n = 1 << max(8, (end - 1).bit_length())
            freqs = torch.arange(n, device=self.inv_freq.device).float()[:, None] * self.inv_freq
            angles = torch.cat((freqs, freqs), dim=-1)
            half = freqs.shape[-1]
            sin = angles.sin()
            self.rope_cos, self.rope_sin = angles.cos(), torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)
        return self.rope_cos[positions][:, None], self.rope_sin[positions][:, None]

    def packed(self) -> list[Packed]:
        """Every layer's weights packed for inference (see :class:`Packed`); stale once they change."""
        return [layer.packed() for layer in self.model.layers]

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def new_cache(self, batch: int, length: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        c, p = self.config, self.lm_head.weight
        shape = (batch, c["num_key_value_heads"], length, c["head_dim"])
        return [(p.new_zeros(shape), p.new_zeros(shape)) for _ in range(c["num_hidden_layers"])]

    def init_weights(self, seed: int) -> Qwen3:
        """Hugging Face's initialisation: normal(0, initializer_range) weights, zero biases, unit norms."""
        g = torch.Generator().manual_seed(seed)
        std = self.config.get("initializer_range", 0.02)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                with torch.no_grad():
                    module.weight.copy_(torch.randn(module.weight.shape, generator=g) * std)
                    if getattr(module, "bias", None) is not None:
                        module.bias.zero_()
            elif isinstance(module, RMSNorm):
                nn.init.ones_(module.weight)
        return self

    @classmethod
    def from_pretrained(cls, path: str | Path, device: torch.device | str = "cpu") -> Qwen3:
        from safetensors.torch import load_file

        path = Path(path)
        model = cls(json.loads((path / "config.json").read_text()))
        state = load_file(str(path / WEIGHTS))
        missing, unexpected = model.load_state_dict(state, strict=False)
        if model.config.get("tie_word_embeddings", False):
            missing = [k for k in missing if k != "lm_head.weight"]
        if missing or unexpected:
            raise ValueError(f"{path / WEIGHTS}: missing {missing[:3]}, unexpected {unexpected[:3]}")
        return model.to(device)

    def save_pretrained(self, path: str | Path) -> None:
        """``config.json`` and ``model.safetensors`` as Hugging Face writes them (tied head left out)."""
        from safetensors.torch import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        if self.config.get("tie_word_embeddings", False):
            state.pop("lm_head.weight", None)
        save_file(state, str(path / WEIGHTS), metadata={"format": "pt"})
        (path / "config.json").write_text(json.dumps(self.config, indent=2, sort_keys=True) + "\n")


def is_qwen3(path: str | Path) -> bool:
    config = Path(path) / "config.json"
    return config.exists() and json.loads(config.read_text()).get("model_type") == "qwen3"
