"""A LoRA teacher for the embedded backend: peft's adapters on the embedded Qwen3's projections.

With ``methods.scout.teacher_lora.rank > 0`` SCOUT's teacher phase trains low-rank adapters and
leaves the teacher's weights frozen, so the teacher's trainer keeps gradients and Adam state for
the adapters only, and the frozen base is the reference the KL term needs (adapters switched off),
where a full teacher keeps a second copy of its initial weights. peft does the wrapping; this
module holds what the embedded trainer needs around it.

Targets are named projections, never peft's ``all-linear``: on this Qwen3 (not a transformers
model) that would also wrap the head, whose weight is tied to the embedding, and merging would
then write the head's update into the embedding.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager

import torch


def wrap(model: torch.nn.Module, cfg: dict):
    """The model with trainable adapters (``cfg``: rank, alpha, target_modules, as ``Grid.spec``
    resolves them) and a frozen base;
    at start its outputs are the base's (peft initialises B to zero). Returns peft's PeftModel: its
    ``base_model.model`` is the same Qwen3, adapters inside, for the forward passes."""
    from peft import LoraConfig, get_peft_model

    # no task_type: CAUSAL_LM expects transformers' generation methods, which this Qwen3 lacks
    config = LoraConfig(
        r=int(cfg["rank"]),
        lora_alpha=cfg["alpha"],
        target_modules=list(cfg["target_modules"]),
        lora_dropout=0.0,
        bias="none",
    )
    return get_peft_model(model, config)


def inner(peft_model) -> torch.nn.Module:
    """The wrapped Qwen3 (its projections carry the adapters), which the forward passes take."""
    return peft_model.base_model.model


@contextmanager
def base_only(peft_model):
    """The frozen base (the teacher's initial weights) for the duration: the KL reference."""
    with peft_model.disable_adapter():
        yield


def merged(peft_model) -> torch.nn.Module:
    """A copy of the adapted teacher as a plain Qwen3 (adapters folded into the weights), for export."""
    return copy.deepcopy(peft_model).merge_and_unload()


def adapter_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The adapters' tensors: all a sync to an inference engine needs to send after an update."""
    return {k: v for k, v in model.state_dict().items() if "lora_" in k}


def load_adapters(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Put saved adapters back; a state whose adapter tensors do not match the model's is refused."""
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # a tensor of another shape (another rank, another model)
        raise ValueError(f"the checkpoint's teacher adapters do not fit this teacher: {exc}") from exc
    lost = [k for k in missing if "lora_" in k]
    if unexpected or lost or not state:
        raise ValueError(f"the checkpoint's teacher adapters do not fit this teacher (unexpected {unexpected[:3]}, "
                         f"missing {lost[:3]})")  # fmt: skip
