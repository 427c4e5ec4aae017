"""A run folder is resumed only by the spec that wrote it: a changed hyperparameter, a forced rerun,
a damaged checkpoint or a lost export trains from scratch, with the old folder moved aside."""

from __future__ import annotations

import base64
import json

import pytest
import torch
from safetensors.torch import load_file

from scout import runs
from scout.embedded.trainer import Trainer
from scout.methods import METHODS


def _weights(out):
    return load_file(str(out / "model" / "final" / "model.safetensors"))


def _same(a, b) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


def _train(spec, out, logs=None):
    return Trainer(spec, out, device="cpu").run(log=(logs.append if logs is not None else lambda _: None))


def _killed_after(spec, out, steps: int) -> None:
    """Train, then die at the start of step ``steps + 1`` (as a SIGKILL would, without cleanup)."""
    tr = Trainer(spec, out, device="cpu")
    real = tr.student_step

    def step(s):
        if s == steps:
            raise KeyboardInterrupt
        return real(s)

    tr.student_step = step
    with pytest.raises(KeyboardInterrupt):
        tr.run(log=lambda _: None)


def superseded(out):
    return sorted(out.parent.glob(f"{out.name}.superseded-*"))


def test_weights_spec_ignores_labels_and_paths_but_not_contents(spec_for, tmp_path, world):
    a = spec_for("opd")
    relabelled = {**a, "variant": "opd-copy", "experiments": ["other"], "save_every": 7, "threads": 2}
    assert runs.fingerprint(runs.weights_spec(a)) == runs.fingerprint(runs.weights_spec(relabelled))
    assert runs.fingerprint(runs.weights_spec(a)) != runs.fingerprint(runs.weights_spec({**a, "lr": a["lr"] / 2}))
    # the same data at another path is the same input; other data at the same path is not
    copy = tmp_path / "copy.jsonl"
    copy.write_text(open(a["train_data"]).read())
    moved = {**a, "train_data": str(copy)}
    assert runs.weights_spec(moved) == runs.weights_spec(a)
    copy.write_text(open(a["train_data"]).read().replace("1", "2", 1))
    assert runs.weights_spec(moved)["train_data"] != runs.weights_spec(a)["train_data"]
    diff = runs.differences(runs.weights_spec(a), runs.weights_spec({**a, "lr": 0.5}))
    assert diff == [f"lr: {a['lr']} -> 0.5"]


def test_a_changed_hyperparameter_retrains_and_keeps_the_old_run_aside(spec_for, tmp_path):
    spec = spec_for("esr", total_steps=2, steps_per_epoch=2, save_every=1)
    out = tmp_path / "s1"
    _train(spec, out)
    before = _weights(out)
    (out / "train.json").unlink()  # what Snakemake does before it reruns the job
    changed = spec_for("esr", total_steps=2, steps_per_epoch=2, save_every=1, method_cfg={"esr": {"max_tokens": 4}})
    logs = []
    summary = _train(changed, out, logs)
    assert summary["resumed_from"] is None
    assert json.loads((out / "train.json").read_text())["spec"]["method_cfg"]["esr"]["max_tokens"] == 4
    assert not _same(before, _weights(out))
    (old,) = superseded(out)
    assert _same(before, _weights(old))  # moved aside, not deleted
    assert any("method_cfg.esr.max_tokens: 8 -> 4" in line for line in logs)


def test_a_forced_rerun_of_a_finished_cell_trains_from_scratch(spec_for, tmp_path):
    spec = spec_for("opd", total_steps=2, steps_per_epoch=2, save_every=1)
    out = tmp_path / "s1"
    first = _train(spec, out)
    assert first["resumed_from"] is None
    (out / "train.json").unlink()
    logs = []
    again = _train(spec, out, logs)
    assert again["resumed_from"] is None and again["seconds"] > 0
    assert any("that run finished" in line for line in logs)
    assert _same(_weights(out), _weights(superseded(out)[0]))  # deterministic: the same weights again


def test_a_killed_run_resumes_only_under_the_same_spec(spec_for, tmp_path):
    spec = spec_for("opd", total_steps=4, steps_per_epoch=4, save_every=2)
    ref = tmp_path / "ref"
    _train(spec, ref)
    out = tmp_path / "s1"
    _killed_after(spec, out, 3)
    assert (out / "checkpoints" / "step_2").exists()
    assert _train(spec, out)["resumed_from"] == 2
    assert _same(_weights(ref), _weights(out))

    other = tmp_path / "s2"
    _killed_after(spec, other, 3)
    logs = []
    changed = {**spec, "lr": spec["lr"] * 3}
    assert _train(changed, other, logs)["resumed_from"] is None
    assert any(line.strip().startswith("lr: ") for line in logs)
    assert (superseded(other)[0] / "checkpoints" / "step_2").exists()


def test_a_damaged_checkpoint_trains_from_scratch(spec_for, tmp_path):
    spec = spec_for("opd", total_steps=4, steps_per_epoch=4, save_every=2)
    out = tmp_path / "s1"
    _killed_after(spec, out, 3)
    state = out / "checkpoints" / "step_2" / "trainer_state.pt"
    state.write_bytes(state.read_bytes()[:100])
    logs = []
    assert _train(spec, out, logs)["resumed_from"] is None
    assert any("trainer_state.pt is damaged" in line for line in logs)


def test_a_resume_that_would_lack_an_evaluated_checkpoint_trains_from_scratch(spec_for, tmp_path):
    spec = spec_for("opd", total_steps=4, steps_per_epoch=4, save_every=2)
    out = tmp_path / "s1"
    _killed_after(spec, out, 3)
    probed = {**spec, "eval_every": 1}  # now step 1 and 2 are evaluated, and step 1 was never exported
    logs = []
    assert _train(probed, out, logs)["resumed_from"] is None
    assert any("model/step1" in line for line in logs)
    assert sorted(p.name for p in (out / "model").iterdir()) == ["final", "step1", "step2", "step3"]


def _metrics(out, after: int = 0) -> list[dict]:
    """The training's metrics: not the step's time, nor the teacher self-test's (every job tests its
    teacher at its start, so a continuation's first step has one that a run from scratch lacks)."""
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    keep = lambda k: k != "step_seconds" and not k.startswith("teacher_selftest_")  # noqa: E731
    return [{k: v for k, v in m.items() if keep(k)} for m in lines if m["step"] > after]


@pytest.mark.parametrize("method", sorted(m for m in METHODS if METHODS[m].length_free))
def test_a_longer_run_continues_a_shorter_one_exactly(method, spec_for, tmp_path):
    """Two epochs that continue a one-epoch run end with the weights of two epochs from scratch
    (what lets Grid.plans skip the first epoch of opd-3ep)."""
    short = spec_for(method, epochs=1, total_steps=2, steps_per_epoch=2, save_every=1)
    long = spec_for(method, epochs=2, total_steps=4, steps_per_epoch=2, save_every=1)
    for spec in (short, long):
        if METHODS[method].trains_teacher:
            spec["method_cfg"]["scout"]["interval"] = 1
    _train(long, tmp_path / "fresh")
    _train(short, tmp_path / "short")
    summary = _train({**long, "continue_from": {"run": str(tmp_path / "short"), "step": 2}}, tmp_path / "continued")
    assert summary["continued"] == {"run": str(tmp_path / "short"), "step": 2}
    assert _same(_weights(tmp_path / "fresh"), _weights(tmp_path / "continued"))
    if METHODS[method].trains_teacher:
        teacher = lambda out: load_file(str(out / "model" / "final-teacher" / "model.safetensors"))  # noqa: E731
        assert _same(teacher(tmp_path / "fresh"), teacher(tmp_path / "continued"))
    assert _metrics(tmp_path / "fresh", after=2) == _metrics(tmp_path / "continued", after=2)
    assert [m["step"] for m in _metrics(tmp_path / "continued")] == [1, 2, 3, 4]
    if METHODS[method].needs_teacher:  # the continuation's job tested its teacher before its first step
        third = json.loads((tmp_path / "continued" / "metrics.jsonl").read_text().splitlines()[2])
        assert third["step"] == 3 and third["teacher_selftest_diff"] <= third["teacher_selftest_limit"]


def test_a_run_of_another_spec_is_not_continued(spec_for, tmp_path):
    short = spec_for("opd", epochs=1, total_steps=2, steps_per_epoch=2)
    _train(short, tmp_path / "short")
    long = spec_for("opd", epochs=2, total_steps=4, steps_per_epoch=2, lr=1e-3)
    with pytest.raises(runs.RunMismatch, match="not a shorter run of this spec"):
        _train({**long, "continue_from": {"run": str(tmp_path / "short"), "step": 2}}, tmp_path / "long")


def test_a_failed_rerun_keeps_the_finished_run_and_restore_puts_it_back(spec_for, tmp_path, monkeypatch, capsys):
    """Snakemake deletes train.json before a forced rerun; when that rerun fails, the finished run it
    moved aside comes back with `scout restore`: its weights, its record (with its time, so the
    evaluations made from it stay current), the partial run moved aside in turn."""
    from scout import cli

    spec = spec_for("opd", total_steps=2, steps_per_epoch=2, save_every=1)
    out = tmp_path / "s1"
    first = _train(spec, out)
    text = (out / "train.json").read_text()  # its key order too: the spec's digest depends on it
    before, written = _weights(out), (out / "train.json").stat().st_mtime
    (out / "train.json").unlink()  # what Snakemake does before it reruns the job

    def dies(self, step):
        raise RuntimeError("out of memory (a stand-in)")

    monkeypatch.setattr(Trainer, "student_step", dies)
    with pytest.raises(RuntimeError, match="stand-in"):
        cli.main(["train", "--spec", json.dumps(spec), "--out", str(out)])
    (finished,) = superseded(out)
    assert f"the finished run of this cell is kept at {finished}; `scout restore {out}`" in capsys.readouterr().out
    assert runs.restorable(out) == finished
    monkeypatch.undo()

    # the job was cut off mid-run, so Snakemake marks its output incomplete: restore says how to keep it
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".snakemake" / "incomplete").mkdir(parents=True)
    (tmp_path / ".snakemake" / "incomplete" / base64.urlsafe_b64encode(b"s1/train.json").decode()).write_text("")
    capsys.readouterr()
    assert cli.main(["restore", str(out)]) == 0
    assert json.loads(text) == json.loads(json.dumps(first)) and (out / "train.json").read_text() == text
    assert "`snakemake --cleanup-metadata s1/train.json` (with your --configfile) keeps it" in capsys.readouterr().out
    assert abs((out / "train.json").stat().st_mtime - written) < 1.0
    assert _same(before, _weights(out))
    (partial,) = superseded(out)  # the failed rerun's folder, aside
    assert runs.owner(partial)["complete"] is False and not (partial / "model" / "final").exists()
    with pytest.raises(SystemExit, match="nothing to restore"):
        cli.main(["restore", str(out)])

    # a job that fails before it claims the folder leaves the finished run in place: its record returns
    (out / "train.json").unlink()
    assert runs.restorable(out) == out
    runs.restore(out, log=lambda _: None)
    assert (out / "train.json").read_text() == text

    # a rerun of another spec that fails: the finished run is of the old spec, and is not put back
    (out / "train.json").unlink()
    _killed_after({**spec, "lr": spec["lr"] * 3}, out, 1)
    with pytest.raises(SystemExit, match=r"another spec .* differs in: lr: "):
        cli.main(["restore", str(out)])
