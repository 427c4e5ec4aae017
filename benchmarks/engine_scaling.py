"""How the embedded engine's cost grows with its batch, on the CPU and on a GPU (figures, not a test).

For each batch size (rows), on the toy teacher's architecture (config/config.yaml's toy-large,
randomly initialised: the cost does not depend on the weights) and prompts of toy-math length:

- sample: ``sampling.sample`` of 40 new tokens per row (the budget forces every row to the end);
- train: one forward and backward of ``lm.response_logits`` over 40-token responses, the loss the
  student and teacher updates take (``lm.token_logp``);
- on CUDA, the same forward and backward through transformers' ``Qwen3ForCausalLM`` on the same
  weights, the reference the embedded engine must not be slower than.

The median of ``--repeat`` timings after a warm-up, the GPU synchronised around each. On the CPU
it runs on the pinned code paths with one thread, as the grid's jobs do.

    python -m benchmarks.engine_scaling [--device cpu|cuda] [--rows 32,96,288,864,2592] [--repeat 5]

On an H200 (torch 2.11), measured by a session that had one:

    | rows  | sample 40 tokens | train fwd+bwd | transformers fwd+bwd |
    | 32    | 0.141 s          | 10.7 ms       | 14.9 ms              |
    | 288   | 0.147 s          | 17.8 ms       | 26.6 ms              |
    | 2,592 | 0.190 s          | 50.7 ms       | 74.5 ms              |

At 2,592 rows the embedded training step takes 0.68x transformers' on the same GPU (3.8x slower
before its per-row loops went). The toy world's jobs are still the CPU's (``device: cpu``): one
toy job is far too small to fill a GPU, and many sharing one were slower than the CPU's.
"""

from __future__ import annotations

import argparse
import statistics
import time

from scout.reproducibility import pin_numerics

pin_numerics()  # before torch is imported: the grid's code paths on the CPU

import torch  # noqa: E402

from scout.embedded import lm, sampling  # noqa: E402
from scout.embedded.qwen3 import Qwen3  # noqa: E402

ARCH = {"model_type": "qwen3", "vocab_size": 40, "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 32, "intermediate_size": 128, "rms_norm_eps": 1e-6,
        "rope_theta": 1e6, "tie_word_embeddings": True, "max_position_embeddings": 256}  # fmt: skip
NEW = 40  # tokens sampled per row, and response length of the training step


def _timed(fn, device: torch.device, repeat: int) -> float:
    fn()  # warm-up (allocations, kernels' first launch)
    out = []
    for _ in range(repeat):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def batch(rows: int, g: torch.Generator) -> tuple[list[list[int]], list[list[int]]]:
    """Prompts of 12-30 tokens and responses of NEW tokens, ids drawn at random (3 and up: past the
    special tokens)."""
    lengths = torch.randint(12, 31, (rows,), generator=g).tolist()
    prompts = [torch.randint(3, ARCH["vocab_size"], (k,), generator=g).tolist() for k in lengths]
    responses = [torch.randint(3, ARCH["vocab_size"], (NEW,), generator=g).tolist() for _ in range(rows)]
    return prompts, responses


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--rows", default="32,96,288,864,2592")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--no-transformers", action="store_true", help="skip transformers' reference (CUDA)")
    args = p.parse_args()
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)
    model = Qwen3(ARCH).init_weights(0).to(device)
    hf = None
    if device.type == "cuda" and not args.no_transformers:
        import tempfile

        from transformers import Qwen3ForCausalLM

        with tempfile.TemporaryDirectory() as tmp:
            model.save_pretrained(tmp)
            hf = Qwen3ForCausalLM.from_pretrained(tmp, dtype=torch.float32).to(device)
    g = torch.Generator().manual_seed(0)
    params = sampling.Sampling(NEW, 1.0, 1.0)
    print(f"{device} ({torch.cuda.get_device_name() if device.type == 'cuda' else 'one thread, pinned'}), toy-large, "
          f"{NEW} tokens; median of {args.repeat}")  # fmt: skip
    head = f"{'rows':>6} {'sample':>10} {'x':>6} {'train':>10} {'x':>6}" + (f" {'transformers':>13} {'x':>6}" if hf else "")
    print(head)
    first = None
    for rows in map(int, args.rows.split(",")):
        prompts, responses = batch(rows, g)

        def sample(prompts=prompts):
            with torch.no_grad():
                gen = torch.Generator().manual_seed(1)
                sampling.sample(model, prompts, params, eos_id=-1, pad_id=0, generator=gen)

        def train(m=model, prompts=prompts, responses=responses):
            logits, tokens, mask = lm.response_logits(m, prompts, responses, 0)
            (-(lm.token_logp(logits, tokens) * mask).sum() / mask.sum()).backward()
            m.zero_grad(set_to_none=True)

        def train_hf(prompts=prompts, responses=responses):
            ids, att, rmask, t_max = lm.pad_batch(prompts, responses, 0, device)
            logits = hf(input_ids=ids, attention_mask=att).logits.float()
            starts = torch.tensor([len(q) - 1 for q in prompts])[:, None]
            idx = (starts + torch.arange(t_max)).clamp(max=ids.shape[1] - 1).to(device)
            got = logits.gather(1, idx.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
            tokens = lm.padded(responses, t_max, 0)[0].to(device)
            (-(lm.token_logp(got, tokens) * rmask).sum() / rmask.sum()).backward()
            hf.zero_grad(set_to_none=True)

        t = (_timed(sample, device, args.repeat), _timed(train, device, args.repeat))
        t_hf = _timed(train_hf, device, args.repeat) if hf else None
        first = first or (t, t_hf)
        line = f"{rows:>6} {t[0]:>9.3f}s {t[0] / first[0][0]:>5.2f}x {1000 * t[1]:>8.1f}ms {t[1] / first[0][1]:>5.2f}x"
        if hf:
            line += f" {1000 * t_hf:>11.1f}ms {t_hf / first[1]:>5.2f}x"
        print(line, flush=True)


if __name__ == "__main__":
    main()
