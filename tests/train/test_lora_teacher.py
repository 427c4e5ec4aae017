"""SCOUT with a LoRA teacher on the embedded backend (``methods.scout.teacher_lora``): peft's
adapters train, the base stays frozen and is the KL reference, packed inference computes the
adapted teacher, checkpoints resume exactly and exports are plain Qwen3 checkpoints."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from scout import jobs, methods
from scout.config import ConfigError, validate
from scout.embedded import lm, lora
from scout.embedded.qwen3 import Qwen3
from scout.embedded.trainer import Trainer
from scout.grid import Grid
from tests.support.toy import cell_spec, toy_config
from tests.support.trainer import Alternating, metrics_without_time

TARGETS = list(methods.LORA_TARGETS)


def _lora_spec(spec_for, **over) -> dict:
    spec = spec_for("scout", **over)
    spec["method_cfg"]["scout"].update(
        interval=1, teacher_lr=1e-2, teacher_lora={"rank": 4, "alpha": 8, "target_modules": TARGETS}
    )
    return spec


def _trainer(spec, out) -> Trainer:
    tr = Trainer(spec, out, device="cpu")
    tr.grader.close()
    tr.grader = Alternating()  # every GRPO group informative, so the teacher update is never zero
    return tr


def test_lora_delta_by_hand():
    """A rank-1 adapter's update to a 2x2 projection: W + (alpha / r) B A, worked out by hand."""
    model = torch.nn.Sequential()
    model.q_proj = torch.nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        model.q_proj.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
    wrapped = lora.wrap(model, {"rank": 1, "alpha": 2, "target_modules": ["q_proj"]})
    layer = lora.inner(wrapped).q_proj
    with torch.no_grad():
        layer.lora_A["default"].weight.copy_(torch.tensor([[1.0, 2.0]]))
        layer.lora_B["default"].weight.copy_(torch.tensor([[0.5], [-1.0]]))
    # scale 2 / 1; B A = [[0.5, 1], [-1, -2]] -> W + 2 B A = [[2, 2], [-2, -3]]
    from scout.embedded.qwen3 import applied_weight

    assert torch.equal(applied_weight(layer), torch.tensor([[2.0, 2.0], [-2.0, -3.0]]))
    assert torch.allclose(layer(torch.tensor([[1.0, 1.0]])), torch.tensor([[4.0, -5.0]]))
    with lora.base_only(wrapped):
        assert torch.equal(applied_weight(layer), torch.eye(2))
        assert torch.equal(layer(torch.tensor([[1.0, 1.0]])), torch.tensor([[1.0, 1.0]]))


def test_wrapped_teacher_trains_adapters_only_and_starts_as_its_base(world):
    base = lm.load_model(world["teacher"], "cpu")
    ids = torch.tensor([[3, 4, 5, 6, 7]])
    pos = torch.arange(5)[None]
    with torch.no_grad():
        before = base(ids, pos, None)
    wrapped = lora.wrap(base, {"rank": 4, "alpha": 8, "target_modules": TARGETS})
    teacher = lora.inner(wrapped)
    assert isinstance(teacher, Qwen3)  # the forward passes keep their Qwen3 paths
    layers = len(teacher.model.layers)
    trainable = {n for n, p in teacher.named_parameters() if p.requires_grad}
    assert len(trainable) == 2 * len(TARGETS) * layers and all("lora_" in n for n in trainable)
    assert not any("lm_head" in n or "embed" in n for n in trainable)  # the tied head is left alone
    with torch.no_grad():
        assert torch.equal(teacher(ids, pos, None), before)  # B = 0: the base's outputs


def test_packed_inference_computes_the_adapted_teacher(world):
    """Sampling and scoring run on packed weights (no grad): they must include the adapters' update,
    as the modules' own forward (with grad) does, and exclude it with adapters switched off."""
    wrapped = lora.wrap(lm.load_model(world["teacher"], "cpu"), {"rank": 4, "alpha": 8, "target_modules": TARGETS})
    teacher = lora.inner(wrapped)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in teacher.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    ids = torch.tensor([[3, 4, 5, 6, 7, 8]])
    pos = torch.arange(6)[None]
    modules = teacher(ids, pos, None).detach()  # grad enabled: no packing
    with torch.no_grad():
        packed = teacher(ids, pos, None, packed=teacher.packed())
        with lora.base_only(wrapped):
            base_packed = teacher(ids, pos, None, packed=teacher.packed())
            base_modules = teacher(ids, pos, None)
    assert torch.allclose(packed, modules, atol=1e-5)
    assert (packed - base_packed).abs().max() > 1e-3  # the update is there, not only in o/down_proj
    assert torch.allclose(base_packed, base_modules, atol=1e-5)


def test_lora_teacher_phase_moves_adapters_not_base_and_uses_base_as_reference(spec_for, tmp_path, monkeypatch):
    spec = _lora_spec(spec_for, total_steps=1, steps_per_epoch=1)
    tr = _trainer(spec, tmp_path)
    assert tr.models.teacher_ref is None  # no second copy of the teacher: the base is the reference
    teacher = tr.models.teacher
    frozen = {n: p.detach().clone() for n, p in teacher.named_parameters() if not p.requires_grad}
    adapters = {n: p.detach().clone() for n, p in teacher.named_parameters() if p.requires_grad}
    refs = []
    real = lm.continuation_logp

    def spy(model, *a, **kw):
        if not torch.is_grad_enabled():  # the reference pass: adapters must be off there
            refs.append(all(m.disable_adapters for m in model.modules() if hasattr(m, "lora_A")))
        return real(model, *a, **kw)

    monkeypatch.setattr(lm, "continuation_logp", spy)
    metrics = tr.student_step(0)
    assert metrics["teacher_update"] == 1 and refs == [True]
    assert all(torch.equal(p, frozen[n]) for n, p in teacher.named_parameters() if n in frozen)
    assert any(not torch.equal(p, adapters[n]) for n, p in teacher.named_parameters() if n in adapters)
    assert not any(m.disable_adapters for m in teacher.modules() if hasattr(m, "lora_A"))  # switched back on


def test_lora_teacher_resumes_exactly_and_exports_merged_weights(spec_for, tmp_path):
    spec = _lora_spec(spec_for, total_steps=4, steps_per_epoch=4, save_every=2)
    ref = tmp_path / "uninterrupted"
    _trainer(spec, ref).run(log=lambda _: None)
    out = tmp_path / "resumed"
    first = _trainer({**spec, "total_steps": 4}, out)
    for step in range(2):  # two steps, a checkpoint, then a new process's trainer takes over
        first.student_step(step)
        first.progress.step = step + 1
    first.save_checkpoint()
    saved = torch.load(out / "checkpoints" / "step_2" / "trainer_state.pt", weights_only=False)
    assert saved["teacher"] and all("lora_" in k for k in saved["teacher"])  # adapters only, not the base
    second = _trainer(spec, out)
    assert second.try_resume(log=lambda _: None)
    a = {k: v for k, v in second.models.teacher.state_dict().items() if "lora_" in k}
    b = {k: v for k, v in first.models.teacher.state_dict().items() if "lora_" in k}
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    second.run(log=lambda _: None)
    # the resumed steps 3-4 are the uninterrupted run's (this test wrote no metrics for steps 1-2)
    assert metrics_without_time(ref / "metrics.jsonl")[2:] == metrics_without_time(out / "metrics.jsonl")
    w_ref = load_file(str(ref / "model" / "final-teacher" / "model.safetensors"))
    w_out = load_file(str(out / "model" / "final-teacher" / "model.safetensors"))
    assert w_ref.keys() == w_out.keys() and all(torch.equal(w_ref[k], w_out[k]) for k in w_ref)
    # the export is an ordinary Qwen3 checkpoint of the adapted teacher, not the base plus adapters
    assert not any("lora_" in k or "base_layer" in k for k in w_ref)
    exported = Qwen3.from_pretrained(ref / "model" / "final-teacher")
    initial = lm.load_model(spec["teacher"], "cpu")
    ids, pos = torch.tensor([[3, 4, 5, 6]]), torch.arange(4)[None]
    with torch.no_grad():
        assert not torch.equal(exported(ids, pos, None), initial(ids, pos, None))
    config = json.loads((ref / "model" / "final-teacher" / "config.json").read_text())
    assert config["model_type"] == "qwen3"


def test_lora_load_refuses_adapters_of_another_shape(spec_for, tmp_path):
    tr = _trainer(_lora_spec(spec_for, total_steps=1, steps_per_epoch=1), tmp_path)
    state = lora.adapter_state(tr.models.teacher)
    key = next(iter(state))
    with pytest.raises(ValueError, match="do not fit"):
        lora.load_adapters(tr.models.teacher, {key: torch.zeros(1), **{k: v for k, v in state.items() if k != key}})


def test_lora_variant_resolves_into_the_spec_and_leaves_full_teacher_specs_alone():
    cfg = validate(toy_config())
    lora_spec = cell_spec(cfg, "toy-l-s-math", "scout-lora", 1)["method_cfg"]["scout"]
    assert lora_spec["teacher_lora"] == {"rank": 8, "alpha": 16, "target_modules": TARGETS}
    full = cell_spec(cfg, "toy-l-s-math", "scout", 1)["method_cfg"]["scout"]
    assert "teacher_lora" not in full  # rank 0: the paper's spec, byte for byte
    assert jobs.compared_teachers(Grid.of(cfg), "toy-l-s-math")[-1] == ("scout-lora", "scout-lora")


def test_lora_rank_on_a_method_without_teacher_updates_is_refused():
    cfg = toy_config()
    cfg["experiments"]["lora"]["methods"].append({"name": "opd-lora", "method": "opd", "teacher_lora_rank": 8})
    with pytest.raises(ConfigError, match="teacher_lora_rank: method 'opd' has no teacher updates"):
        validate(cfg)
