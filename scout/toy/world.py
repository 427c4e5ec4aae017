"""Build the toy world: data files, the tokenizer, and tiny Qwen3 models trained from scratch."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import torch

from scout.embedded import lm
from scout.embedded.qwen3 import Qwen3
from scout.io import read_jsonl, write_jsonl
from scout.schema import default
from scout.toy.tasks import Split, generate_split, worked_segments
from scout.toy.tokenizer import build_tokenizer
from scout.tuning import overlap

# Worked solutions run 20-110 tokens: a batch scored 8 rows at a time, sorted by length, pads a
# tenth of its tokens instead of a third (a pretraining step about a fifth faster)
CHUNK = 8


def build_data(config: dict, out_dir: str | Path) -> dict[str, int]:
    """Every train split, benchmark and validation set of the toy config. Benchmarks exclude train
    prompts; a validation set (``toy.validation``: the training distribution's generator, held out)
    excludes train and benchmark prompts, which is checked."""
    seed = config["toy"]["seed"]
    counts: dict[str, int] = {}
    train_prompts: set[str] = set()
    tests: dict[str, list[dict]] = {}
    for name, s in config["toy"]["splits"].items():
        rows = generate_split(Split(name, s["domain"], s["rows"], s["min_ops"], s["max_ops"]), seed)
        train_prompts |= {r["prompt"] for r in rows}
        write_jsonl(Path(out_dir) / f"{name}.jsonl", rows)
        counts[name] = len(rows)
    for name, b in config["benchmarks"].items():
        split = Split(name, b["domain"], b["rows"], b["toy"]["min_ops"], b["toy"]["max_ops"], b["repeats"])
        tests[name] = generate_split(split, seed, exclude=train_prompts)
        write_jsonl(Path(out_dir) / f"{name}.jsonl", tests[name])
        counts[name] = len(tests[name])
    taken = train_prompts | {r["prompt"] for rows in tests.values() for r in rows}
    for name, v in config["toy"].get("validation", {}).items():
        rows = generate_split(Split(name, v["domain"], v["rows"], v["min_ops"], v["max_ops"]), seed, exclude=taken)
        hits = overlap(rows, tests)
        if hits:  # generate_split excludes them; a generator change that let one through is an error
            raise ValueError(f"toy validation set {name} shares prompts with {sorted(hits)}")
        write_jsonl(Path(out_dir) / f"{name}.jsonl", rows)
        counts[name] = len(rows)
    return counts


def build_model(arch: dict, tokenizer_dir: str | Path, seed: int) -> tuple[Qwen3, object]:
    """A freshly initialised Qwen3 model; its config is transformers' own ``Qwen3Config``, so the
    saved folder loads in transformers and vLLM as any Qwen3 checkpoint does."""
    from transformers import Qwen3Config

    tok = lm.load_tokenizer(tokenizer_dir)
    cfg = Qwen3Config(
        architectures=["Qwen3ForCausalLM"],
        vocab_size=len(tok),
        hidden_size=arch["hidden_size"],
        num_hidden_layers=arch["layers"],
        num_attention_heads=arch["heads"],
        num_key_value_heads=arch["kv_heads"],
        head_dim=arch["hidden_size"] // arch["heads"],
        intermediate_size=arch["intermediate_size"],
        max_position_embeddings=256,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        dtype="float32",
    )
    return Qwen3(json.loads(cfg.to_json_string(use_diff=True))).init_weights(seed), tok


def pretrain(
    arch: dict, tokenizer_dir: str | Path, data_files: list[str], out_dir: str | Path, seed: int = 0, log=print,
    spec: dict | None = None,
) -> dict:  # fmt: skip
    """Supervised training on worked solutions (loss on solution tokens only). ``spec``, the job's
    spec, is kept in ``pretrain.json`` (what the model was made from)."""
    torch.set_num_threads(1)
    model, tok = build_model(arch, tokenizer_dir, seed)
    rows = [row for f in data_files for row in read_jsonl(f)]
    rng = random.Random(seed)
    examples = []
    for r in rows:
        p = lm.prompt_ids(tok, r["prompt"])
        ids, learned = [], []
        for text, learn in worked_segments(r, rng, arch.get("hasty", default("models.*.toy.hasty")), arch.get("checks", default("models.*.toy.checks"))):
            piece = tok.encode(text, add_special_tokens=False)
            ids += piece
            learned += [float(learn)] * len(piece)
        examples.append((p, ids + [tok.eos_token_id], learned + [1.0]))
    opt = torch.optim.AdamW(model.parameters(), lr=arch["lr"], weight_decay=0.01)
    steps = arch["steps"]
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20) * max(0.1, 1 - s / steps))
    model.train()
    t0, losses = time.perf_counter(), []
    for step in range(steps):
        batch = [examples[rng.randrange(len(examples))] for _ in range(arch["batch"])]
        logits, tokens, mask = lm.response_logits(
            model, [b[0] for b in batch], [b[1] for b in batch], tok.pad_token_id, chunk=CHUNK
        )
        # context-only tokens (a late-caught slip) are not targets: each row's 0/1 weights over its tokens
        learned = [b[2] for b in batch]
        rows = torch.arange(mask.shape[1]) < torch.tensor([len(w) for w in learned])[:, None]
        mask[rows] *= torch.tensor([w for ws in learned for w in ws])
        loss = -(lm.token_logp(logits, tokens) * mask).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if (step + 1) % 50 == 0 or step + 1 == steps:
            log(f"pretrain step {step + 1}/{steps} loss {sum(losses[-50:]) / len(losses[-50:]):.4f}")
    model.save_pretrained(str(out_dir))
    tok.save_pretrained(str(out_dir))
    info = {
        "parameters": sum(p.numel() for p in model.parameters()),
        "steps": steps,
        "final_loss": sum(losses[-20:]) / len(losses[-20:]),
        "seconds": time.perf_counter() - t0,
        **({"spec": spec} if spec is not None else {}),
    }
    (Path(out_dir) / "pretrain.json").write_text(json.dumps(info, indent=1))
    return info


def build_tokenizer_files(out_dir: str | Path) -> int:
    return len(build_tokenizer(out_dir))
