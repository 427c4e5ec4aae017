"""The embedded backend's plain-torch Qwen3 and tokenizer reader against transformers' own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from scout.embedded import lm, sampling
from scout.embedded.qwen3 import Qwen3, is_qwen3, rotate
from scout.embedded.tokenizer import Tokenizer
from scout.toy.tasks import Split, generate_split, worked_solution
from scout.toy.world import build_model, build_tokenizer_files


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A toy Qwen3 (GQA: 2 query heads per key head, head_dim 32) with random weights, saved."""
    root = tmp_path_factory.mktemp("qwen3")
    build_tokenizer_files(root / "tok")
    arch = {"hidden_size": 64, "layers": 2, "heads": 2, "kv_heads": 1, "intermediate_size": 96}
    model, tok = build_model(arch, root / "tok", seed=3)
    with torch.no_grad():  # norms away from 1, so a wrong norm would show
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    model.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    return root / "model"


def test_logits_equal_transformers_on_the_same_checkpoint(saved):
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(str(saved), dtype=torch.float32).eval()
    ours = Qwen3.from_pretrained(saved).eval()
    assert is_qwen3(saved) and json.loads((saved / "config.json").read_text())["head_dim"] == 32
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, len(Tokenizer(saved)), (3, 17), generator=g)
    att = torch.ones_like(ids)
    att[1, 12:] = 0  # right padding
    att[2, 5:] = 0
    with torch.no_grad():
        want = ref(input_ids=ids, attention_mask=att).logits
        got = lm.score(ours, ids, att)
    valid = att.bool()
    assert torch.allclose(got[valid], want[valid], atol=1e-5)


def test_incremental_decoding_matches_a_full_forward(saved):
    """Left-padded prompts decoded step by step with the KV cache give the logits a full forward
    of each unpadded sequence gives."""
    model = Qwen3.from_pretrained(saved).eval()
    prompts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
    steps = [[20, 21, 22], [23, 24, 25], [26, 27, 28]]
    dec = sampling.Decoder(model, prompts, pad_id=0, max_new=3)
    seen = [dec.logits.clone()]
    for j in range(2):
        seen.append(dec.step(torch.tensor([s[j] for s in steps])).clone())
    for i, (p, s) in enumerate(zip(prompts, steps, strict=True)):
        seq = torch.tensor([p + s[:2]])
        with torch.no_grad():
            full = lm.score(model, seq, torch.ones_like(seq))[0]
        for j in range(3):
            assert torch.allclose(seen[j][i], full[len(p) - 1 + j], atol=1e-5)


def _under_strict_mkl(check: str, *args) -> None:
    """Run ``check(*args)`` of this module in a process whose MKL runs in its strict reproducible
    mode (``MKL_CBWR=AVX2,STRICT``, with the vendor shim that has MKL honour it on AMD CPUs too),
    where a row's product does not depend on the rows and columns computed beside it: a check that
    two computations are the same dot products. The pipeline's jobs take the standard AVX2 branch
    (``scout.reproducibility``), which sums a matrix product in an order that may depend on its
    shape: there the same dot products agree to rounding."""
    import os
    import subprocess
    import sys

    from tests.support.toy import REPO

    env = {**os.environ, "SCOUT_NATIVE_NUMERICS": "1", "MKL_CBWR": "AVX2,STRICT", "ATEN_CPU_CAPABILITY": "avx2"}
    code = ("from scout.reproducibility import load_shim; load_shim(); import tests.train.test_qwen3 as t; "
            f"t.{check}(*{[str(a) if not isinstance(a, bool) else a for a in args]!r})")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]


def _shared_prefill_equals_each(saved, exact: bool = True) -> None:
    saved = Path(saved)
    model = Qwen3.from_pretrained(saved).eval()
    prompts = [p for p in ([5, 6, 7, 8, 9], [10, 11], [12, 13, 14]) for _ in range(4)]
    tokens = torch.arange(20, 32)
    same = torch.equal if exact else (lambda a, b: torch.allclose(a, b, rtol=1e-5, atol=1e-6))
    with torch.no_grad():
        shared = sampling.Decoder(model, prompts, pad_id=0, max_new=4)
        each = sampling.Decoder(model, prompts, pad_id=0, max_new=4, share=False)
        assert len(shared.cache[0][0]) == len(each.cache[0][0]) == 12
        assert same(shared.logits, each.logits)
        for j in range(3):
            assert same(shared.step(tokens + j), each.step(tokens + j))


def test_repeated_prompts_prefilled_once_give_the_same_logits(saved):
    """Bit for bit where a row's product does not depend on the batch (MKL's strict mode); to
    rounding on the pinned standard mode the jobs run."""
    _under_strict_mkl("_shared_prefill_equals_each", saved)
    _shared_prefill_equals_each(saved, exact=False)


@pytest.mark.parametrize("bias", [False, True])
def test_packed_inference_gives_the_training_paths_logits(saved, bias):
    """Scoring without gradients runs on packed weights (q, k, v as one matrix, gate and up as one,
    the q and k norms together); it computes the training path's dot products: bit for bit where a
    product does not depend on the columns beside it (MKL's strict mode), to rounding on the
    pinned standard mode."""
    _under_strict_mkl("_packed_equals_training_path", saved, bias)
    _packed_equals_training_path(saved, bias, exact=False)


def _packed_equals_training_path(saved, bias: bool, exact: bool = True) -> None:
    saved = Path(saved)
    model = Qwen3.from_pretrained(saved)
    if bias:
        model = Qwen3({**model.config, "attention_bias": True}).init_weights(5)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "norm" in name or name.endswith("bias"):
                    p.add_(0.3 * torch.randn_like(p))
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(4, model.config["vocab_size"], (5, 23), generator=g)
    att = torch.ones_like(ids)
    train_path = lm.score(model, ids, att)
    with torch.no_grad():
        packed = lm.score(model, ids, att)
    assert train_path.requires_grad and not packed.requires_grad
    if exact:
        assert torch.equal(train_path.detach(), packed)
    else:
        assert torch.allclose(train_path.detach(), packed, rtol=1e-5, atol=1e-6)


def test_rotary_tables_and_folded_sign_equal_the_per_call_rotate_half(saved):
    """Hugging Face's rotary embedding computed per call, against the tables (grown past their
    first size) and the sign-folded ``rotate``: values and gradients bit for bit."""
    model = Qwen3.from_pretrained(saved)
    g = torch.Generator().manual_seed(2)
    positions = torch.randint(0, 700, (3, 9), generator=g)
    model.rope(positions[:, :1] * 0, 1)  # a first, small table
    cos, sin = model.rope(positions, 700)
    assert len(model.rope_cos) == 1024
    freqs = positions[..., None].float() * model.inv_freq
    angles = torch.cat((freqs, freqs), dim=-1)[:, None]
    assert torch.equal(cos, angles.cos())
    x = torch.randn(3, 2, 9, model.config["head_dim"], generator=g, requires_grad=True)
    half = x.shape[-1] // 2
    want = x * angles.cos() + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * angles.sin()
    (want_grad,) = torch.autograd.grad(want.square().sum(), x)
    got = rotate(x, cos, sin)
    (got_grad,) = torch.autograd.grad(got.square().sum(), x)
    assert torch.equal(got, want) and torch.equal(got_grad, want_grad)


def test_dropping_finished_rows_changes_the_others_only_by_rounding(saved):
    model = Qwen3.from_pretrained(saved).eval()
    prompts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
    with torch.no_grad():
        full = sampling.Decoder(model, prompts, pad_id=0, max_new=4)
        kept = sampling.Decoder(model, prompts, pad_id=0, max_new=4)
        full.step(torch.tensor([20, 21, 22]))
        kept.step(torch.tensor([20, 21, 22]))
        kept.keep(torch.tensor([0, 2]))  # row 1 finished
        want = full.step(torch.tensor([23, 24, 25]))[[0, 2]]
        assert torch.allclose(kept.step(torch.tensor([23, 25])), want, atol=1e-5)


def test_transformers_loads_what_we_save_after_training(saved, tmp_path):
    from transformers import AutoModelForCausalLM

    model = Qwen3.from_pretrained(saved)
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight.mul_(1.5)
    model.save_pretrained(tmp_path / "m")
    ref = AutoModelForCausalLM.from_pretrained(str(tmp_path / "m"), dtype=torch.float32)
    assert torch.equal(ref.model.layers[0].mlp.up_proj.weight, model.model.layers[0].mlp.up_proj.weight)
    assert ref.lm_head.weight.data_ptr() == ref.model.embed_tokens.weight.data_ptr()  # still tied


def test_tokenizer_reader_agrees_with_autotokenizer(saved):
    from transformers import AutoTokenizer

    ref, ours = AutoTokenizer.from_pretrained(str(saved)), Tokenizer(saved)
    assert (ours.eos_token_id, ours.pad_token_id, ours.bos_token_id, len(ours)) == (
        ref.eos_token_id, ref.pad_token_id, ref.bos_token_id, len(ref),
    )  # fmt: skip
    rng = __import__("random").Random(0)
    texts = []
    for domain in ("math", "code"):
        for row in generate_split(Split("t", domain, 8, 1, 5), 0):
            texts += [row["prompt"], worked_solution(row, rng, hasty=0.5)]
    for text in texts:
        ids = ours.encode(text)
        assert ids == ref.encode(text, add_special_tokens=False)
        assert ours.decode(ids) == ref.decode(ids) == text
        msgs = [{"role": "user", "content": text}]
        assert ours.apply_chat_template(msgs) == ref.apply_chat_template(
            msgs, tokenize=False, add_generation_prompt=True
        )


def test_chat_template_options_reach_the_template(tmp_path, saved):
    """Template options (Qwen3's enable_thinking) are template variables, as in transformers."""
    from transformers import AutoTokenizer

    folder = tmp_path / "tok"
    Tokenizer(saved).save_pretrained(folder)
    (folder / "chat_template.jinja").write_text(
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% if enable_thinking is defined and not enable_thinking %}"
        "<think></think>{% endif %}{% endif %}"
    )
    ref, ours = AutoTokenizer.from_pretrained(str(folder)), Tokenizer(folder)
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1"}]
    for opts in ({}, {"enable_thinking": False}, {"enable_thinking": True}):
        want = ref.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, **opts)
        assert ours.apply_chat_template(msgs, **opts) == want
    assert ours.apply_chat_template(msgs, enable_thinking=False).endswith("<assistant><think></think>")
