"""verl itself, on CPU: scout's driver runs verl 0.9.1's own trainer (V1 sync, FSDP2 over gloo,
vLLM's CPU build as the rollout and the teacher's engine, a local Ray) for two steps of every cell
kind the paper grid uses, on toy models, and the toy evaluation reads the exported checkpoints. The
world, the specs and the runs are the first GPU node's check's (benchmarks/gpu_check.py), which
reads them with its own report: the check's CPU form, on every CI run.

What a GPU run would check, checked here: the rollout's and the actor's log-probs agree after a
weight sync; SCOUT's teacher changes in its update and its engine then serves exactly the new
weights (gloo sync, checksums at both ends); a killed run resumes from the right step. What it
cannot show: multi-node placement, NCCL, CUDA graphs, memory at scale (docs/verl-backend.md).

Slow: 1.5-3 minutes a cell kind on 2 cores, almost all of it Ray, worker and vLLM start-up (a
dozen processes a run, each importing torch, vLLM or verl: 4-12 CPU-seconds apiece); a run alone
leaves a core idle while its engines start one after the other, so the runs go two at a time
(``SCOUT_VERL_CPU_LANES``), which keeps both cores busy, each in its own local Ray, with at most
one of the kinds that train a full teacher on a pool of its own (SCOUT, the control; ~10 GB each)
at once; the shared LoRA teacher's run goes beside the control's
(19.2 GB used at the peak of the two on this 24 GB machine; 638 s for the five runs against 702 s
with the two apart). CI runs each verl path once:
the teacher phase with a full teacher through the prefix-0 control (three nodes; its bare-prompt
groups are the informative ones, so its teacher must change), SCOUT's prefix continuations with a
LoRA teacher on its engine's GPU (``teacher_trainer: shared``: two nodes, the engine asleep while
the teacher trains) in the kill-and-resume (4 steps, killed after the step-2 checkpoint with its
whole process group, Ray's processes included, then resumed), Relay-OPD and Prune-OPD (their
agent loops; Prune-OPD's loss is OPD's, and its teacher is served: vLLM's OpenAI-compatible server,
the job without a teacher engine) and GRPO (the student's rewards, no teacher) for two steps. ``SCOUT_VERL_CPU=all`` adds two-step SCOUT with a full teacher, OPD, OPTR (OPD with its
registered loss, which tests/verl/test_verl_pieces.py runs through verl by hand), the LoRA teacher on a
pool of its own and GRPO's own kill-and-resume: runs a 30-minute CI cannot hold (three lanes ran
out of memory on 24 GB). Each run's output is kept beside its run folder (``runs/<kind>.log``).
``-m "not verl_cpu"`` leaves the file out.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path

import pytest

from benchmarks import gpu_check
from scout import methods
from scout.paths import Paths

pytestmark = pytest.mark.verl_cpu
pytest.importorskip("verl", reason="needs verl (pip install '.[verl]')")

# every cell kind of the paper grid
KINDS = ["scout", "relay_opd", "opd", "opd_teacher_grpo", "prune_opd", "optr", "grpo"]
RESUME = "grpo-resume"
LORA = "scout-lora-resume"  # SCOUT with a shared LoRA teacher, killed and resumed (experiment lora's variant)
LORA_OWN = "scout-lora-own-pool"  # the same teacher on a pool of its own (three nodes), two steps
ALL = os.environ.get("SCOUT_VERL_CPU") == "all"
# the order the lanes take them: the kinds with a teacher trainer apart, the runs balanced over the lanes
SERVED = "prune_opd"  # trained against a teacher server (its top-k through the server's API)
RUN = [LORA, "opd_teacher_grpo", "relay_opd", SERVED, "grpo"]
RUN += ["scout", RESUME, "opd", "optr", LORA_OWN] if ALL else []
TEACHER_TRAINERS = {"scout", "opd_teacher_grpo", LORA, LORA_OWN}
EVALUATED, EVALUATION = "relay_opd", "evaluation"  # the export the GPU check's vLLM evaluation reads here
ONE_AT_A_TIME = TEACHER_TRAINERS - {LORA}  # the full teachers' own pools: ~10 GB a run
LANES = int(os.environ.get("SCOUT_VERL_CPU_LANES", "2"))


def _vllm_or_skip() -> None:
    try:
        import vllm  # noqa: F401
    except ImportError:
        if os.environ.get("SCOUT_REQUIRE_VLLM") == "1":
            raise
        pytest.skip("needs vLLM's CPU build (make install-vllm)")


@pytest.fixture(scope="module")
def cpu_world(tmp_path_factory) -> dict:
    """The first GPU node's check's toy world (benchmarks/gpu_check.py), on the CPU: 1-2 operation
    tasks, a 1-layer student and a 2-layer teacher, two steps of 4 prompts, responses of at most 32
    tokens."""
    _vllm_or_skip()
    return gpu_check.build_world(tmp_path_factory.mktemp("verlcpu"), "cpu")


def _spec(cfg: dict, variant: str, **over) -> dict:
    return gpu_check.spec(cfg, variant, **over)


def _lora_spec(cfg: dict, **over) -> dict:
    return gpu_check.lora_spec(cfg, **over)


def _train(world: dict, spec: dict, out: Path, timeout: float = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    return gpu_check.train(world["root"], spec, out, timeout, env)


def _evaluation_reads(export: Path) -> None:
    """The exported checkpoint is one the toy evaluation reads and generates from."""
    from scout.generation import make_generator

    gen = make_generator(str(export), "transformers")
    assert gen.generate(["Compute 1+2."], 1, {"max_new_tokens": 8, "temperature": 0.6, "top_p": 0.95}, seed=0)


def _last(pattern: str, text: str) -> float | None:
    found = re.findall(pattern, text)
    return float(found[-1]) if found else None


@pytest.fixture(scope="module")
def verl_runs(cpu_world) -> dict:
    """Two verl steps of every kind and the kill-and-resume, ``LANES`` at a time: kind -> (what
    it returned, seconds); and under ``EVALUATION`` the GPU check's vLLM evaluation of Relay-OPD's
    export, beside the last runs (it starts when Relay-OPD ends)."""
    one_teacher_trainer = threading.Lock()
    evaluation = {}

    def run(variant: str):
        asked = time.perf_counter()
        with one_teacher_trainer if variant in ONE_AT_A_TIME else nullcontext():
            t0 = time.perf_counter()
            print(f"{variant}: starts at {t0 - start:.0f} s (waited {t0 - asked:.0f} s for its slot)", flush=True)
            if variant == RESUME:
                done = _kill_and_resume(cpu_world, _spec(cpu_world["config"], "grpo", total_steps=4, epochs=2), RESUME)
            elif variant == LORA:  # a teacher phase every step: three syncs to check, one across the resume
                # its step-2 checkpoint evaluated and exported when saved (training.keep_checkpoints)
                spec = _lora_spec(cpu_world["config"], total_steps=4, epochs=2, export_steps=[2], keep_checkpoints="exported")
                done = _kill_and_resume(cpu_world, spec, LORA)
            elif variant == SERVED:
                done = gpu_check.served_run(cpu_world, variant, cpu_world["root"] / "runs" / variant)
            elif variant == LORA_OWN:
                spec = _lora_spec(cpu_world["config"])
                spec["resources"] |= {"nodes": 3, "teacher_trainer": "own"}
                done = _train(cpu_world, spec, cpu_world["root"] / "runs" / variant)
            else:
                done = _train(cpu_world, _spec(cpu_world["config"], variant), cpu_world["root"] / "runs" / variant)
            print(f"{variant}: done in {time.perf_counter() - t0:.0f} s", flush=True)
            if variant == EVALUATED:
                evaluation["thread"] = threading.Thread(
                    target=lambda: evaluation.update(result=gpu_check.evaluate(cpu_world, EVALUATED)))
                evaluation["thread"].start()
            return done, time.perf_counter() - t0

    start = time.perf_counter()
    with ThreadPoolExecutor(LANES) as pool:
        runs = dict(zip(RUN, pool.map(run, RUN), strict=True))
    if "thread" in evaluation:
        evaluation["thread"].join()
        runs[EVALUATION] = evaluation.get("result")
    print(f"{len(RUN)} runs in {time.perf_counter() - start:.0f} s, {LANES} at a time")
    return runs


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param(
            k,
            marks=[]
            if k in RUN
            else pytest.mark.skip(reason="SCOUT_VERL_CPU=all trains it (CI: its verl path in another kind's run)"),
        )
        for k in KINDS
    ],
)
def test_two_verl_steps_of_every_cell_kind(cpu_world, verl_runs, variant):
    out = cpu_world["root"] / "runs" / variant
    done, seconds = verl_runs[variant]
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-6000:]
    summary = json.loads((out / "train.json").read_text())
    assert summary["steps"] == 2 and summary["backend"] == "verl"
    assert (out / "model" / "final" / "config.json").exists()
    from scout.verl import config as vc

    if vc.agent_loop(variant) in vc.LOOPS_WITHOUT_LOGPROBS:
        # Relay-OPD's responses interleave student and teacher legs and carry no rollout log-probs
        # (by design), so there is no rollout/actor agreement to measure: the distillation loss ran
        assert _last(r"actor/distillation/loss:([-+0-9.e]+)", log) is not None
    else:
        # after the weight sync into the rollout engine, the rollout's and the actor's log-probs agree
        assert _last(r"training/rollout_actor_probs_pearson_corr:([0-9.e-]+)", log) > 0.99
    if variant != "grpo":  # the teacher self-test ran before the first update, within its limit
        diff, limit = (_last(rf"scout/teacher_selftest_{k}:([0-9.e-]+)", log) for k in ("diff", "limit"))
        assert diff is not None and diff <= limit, (diff, limit)
        print(f"{variant}: teacher self-test {diff:.2e} nats a token (limit {limit:.2e})")
    if variant in TEACHER_TRAINERS:
        # the teacher phase ran, and the engine received exactly what the teacher's trainer sent
        assert "scout/teacher_update:1" in log and "scout/teacher_pg_loss" in log
        sent = re.findall(r"sent \d+ tensors, \d+ B to \d+ receivers in [0-9.]+ s, checksum (-?[0-9.]+)", log)
        received = re.findall(r"received \d+ tensors, \d+ B in [0-9.]+ s, checksum (-?[0-9.]+)", log)
        assert sent and sent[-1] in received, (sent, received)
        assert (out / "model" / "final-teacher" / "config.json").exists()
    _evaluation_reads(out / "model" / "final")
    from scout.verl.backend import VERL

    steps = VERL.step_seconds(str(out))  # verl's own timing, as the calibration pilot reads it
    assert len(steps) == 2 and all(s > 0 for s in steps), steps
    print(f"{variant}: 2 verl steps in {seconds:.0f} s")


def test_the_prefix0_teacher_changes_in_its_update_and_its_engine_serves_it(cpu_world, verl_runs):
    """The control's teacher continues from the bare prompt, so its groups are informative: its
    weights after the update differ from the initial teacher's, and the checksum the engine
    received is that of the updated weights, not of the initial ones."""
    out = cpu_world["root"] / "runs" / "opd_teacher_grpo"
    assert verl_runs["opd_teacher_grpo"][0].returncode == 0
    from safetensors.torch import load_file

    cfg = cpu_world["config"]
    initial = load_file(str(Path(Paths.of(cfg).model("toy-large")) / "model.safetensors"))
    trained = load_file(str(next((out / "model" / "final-teacher").glob("*.safetensors"))))
    assert _changed(initial, trained)


def test_a_cell_with_a_served_teacher_has_no_teacher_engine_and_scores_through_the_server(cpu_world, verl_runs):
    """Prune-OPD of a setting with ``teacher_server``: its job asks for the student's GPU alone,
    verl's trainer starts no teacher engine (no teacher pool), and every teacher score of its two
    steps, the top-k its loss reads included, came from the server."""
    from omegaconf import OmegaConf

    done, _ = verl_runs[SERVED]
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    out = cpu_world["root"] / "runs" / SERVED
    cfg = OmegaConf.load(out / "verl_config.yaml")
    assert (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node, cfg.distillation.nnodes) == (1, 1, 0)
    assert cfg.scout.teacher_served and cfg.scout.teacher_server.model == "toy-large"
    log = done.stdout + done.stderr
    assert f"the teacher scores at {cfg.scout.teacher_server.url}" in log
    # one request per scored sequence: 2 steps x 4 prompts x n samples, refills on top
    assert done.requests >= 2 * 4 * cfg.actor_rollout_ref.rollout.n, done.requests
    assert _last(r"actor/distillation/loss:([-+0-9.e]+)", log) is not None
    # the sampled token's exact log-prob is in the top-k lists, as an engine of its own gives it
    assert _last(r"prune_sampled_in_teacher_topk:([0-9.e-]+)", log) == 1.0
    print(f"\n{SERVED} through the server: {done.requests} scoring requests answered")


def _changed(initial: dict, exported: dict) -> set[str]:
    """Tensors of an export that differ from the initial model's, rounded as the export is (verl's
    merger writes bf16: an untrained fp32 model differs from its own export by rounding alone)."""
    import torch

    assert set(initial) == set(exported)
    return {k for k in initial if not torch.equal(initial[k].to(exported[k].dtype), exported[k])}


def _kill_and_resume(world: dict, spec: dict, name: str) -> dict:
    """A 4-step run killed after its step-2 checkpoint, then run again to the end. The kill
    takes the run's whole process group: Ray's head, raylet and workers and vLLM's engine are
    started by the driver without a new session, so nothing of that Ray survives, and no other
    run's Ray (another lane's) is touched."""
    out = world["root"] / "runs" / name
    cmd, env = gpu_check.job(spec, out)
    with open(world["root"] / "runs" / f"{name}.killed.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=world["root"],
                                start_new_session=True)  # fmt: skip
        deadline = time.time() + 900
        tracker = out / "checkpoints" / "latest_checkpointed_iteration.txt"
        while time.time() < deadline and proc.poll() is None and not (tracker.exists() and tracker.read_text().strip() == "2"):  # fmt: skip
            time.sleep(1)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    survivors = _group_alive(proc.pid, seconds=30)
    killed = {"checkpoint": tracker.read_text().strip() if tracker.exists() else None,
              "finished": (out / "train.json").exists(), "survivors": survivors}  # fmt: skip
    return {"killed": killed, "resumed": _train(world, spec, out)}


def _group_alive(pgid: int, seconds: float) -> bool:
    """Whether a live (not zombie) process of the group is still there after ``seconds``, killed
    again meanwhile. Zombies are left out: reaping orphans is the init process's business."""

    def members() -> list[int]:
        found = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(stat.parent.name))
        return found

    end = time.time() + seconds
    while members():
        if time.time() > end:
            return True
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        time.sleep(0.5)
    return False


@pytest.mark.skipif(not ALL, reason="SCOUT_VERL_CPU=all (CI: the LoRA teacher's kill-and-resume)")
def test_a_killed_verl_run_resumes_from_its_checkpoint(cpu_world, verl_runs):
    """Killed after its first checkpoint (step 2 of 4), with nothing of its Ray left, the cell
    resumes at step 2 and finishes; the resumed run's rollout and actor agree after its weight
    syncs (GRPO's)."""
    ran, _ = verl_runs[RESUME]
    assert ran["killed"] == {"checkpoint": "2", "finished": False, "survivors": False}
    done = ran["resumed"]
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    summary = json.loads((cpu_world["root"] / "runs" / RESUME / "train.json").read_text())
    assert summary["resumed_from"] == 2 and summary["steps"] == 4
    assert _last(r"training/rollout_actor_probs_pearson_corr:([0-9.e-]+)", done.stdout + done.stderr) > 0.99
    _evaluation_reads(cpu_world["root"] / "runs" / RESUME / "model" / "final")


def _lora_bytes(config: dict, rank: int) -> int:
    """fp32 bytes of a rank-``rank`` adapter on the seven projections of the CPU world's teacher."""
    from scout import teacher_cost as tc

    arch = json.loads((Path(Paths.of(config).model("toy-large")) / "config.json").read_text())
    return 4 * tc.lora_parameters(arch, rank)


def test_scout_with_a_shared_lora_teacher_syncs_its_adapter_alone_and_resumes(cpu_world, verl_runs):
    """SCOUT with a LoRA teacher (verl's FSDP LoRA, scout.verl.lora_sync) that trains on its engine's
    GPU, a teacher phase every step, killed after its step-2 checkpoint and resumed: the trainer has
    no pool of its own (two fake GPUs, OPD's: a third pool could never be placed), the engine sleeps
    through every update and wakes for the sync (on CPU vLLM's sleep frees nothing; its pause and
    resume run), each sync moves the adapter alone (its fp32 bytes, against the full teacher's every
    tensor), the engine then serves what the trainer holds (its probabilities of its own samples
    against the trainer's), the teacher changes, and the resumed run first pushes the checkpoint's
    adapter into the fresh engine."""
    ran, _ = verl_runs[LORA]
    assert ran["killed"] == {"checkpoint": "2", "finished": False, "survivors": False}
    done = ran["resumed"]
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-6000:]
    out = cpu_world["root"] / "runs" / LORA
    summary = json.loads((out / "train.json").read_text())
    assert summary["resumed_from"] == 2 and summary["steps"] == 4
    config = cpu_world["config"]
    rank = summary["spec"]["method_cfg"]["scout"]["teacher_lora"]["rank"]
    res = summary["spec"]["resources"]
    assert res["teacher_trainer"] == "shared" and res["nodes"] * res["gpus_per_node"] == 2
    killed = (cpu_world["root"] / "runs" / f"{LORA}.killed.log").read_text()
    # every teacher phase slept the engine through its update and woke it for the sync: step 1's in
    # the killed run (its step 2 was checkpointed, and verl logs a step's metrics only after its
    # checkpoint, so the kill may come first), steps 3 and 4 in the resumed one
    assert re.search(r"step:1 - .*scout/teacher_engine_asleep_s:[0-9.e+-]+", killed)
    assert len(re.findall(r"scout/teacher_engine_asleep_s", log)) == 2  # steps 3 and 4
    sent = [int(m[1]) for m in re.findall(r"sent (\d+) tensors, (\d+) B", killed + log)]
    assert sent and set(sent) == {_lora_bytes(config, rank)}, sent  # adapters only, every sync
    # the resumed run syncs once more than it updates (steps 3 and 4): first, on start, the
    # checkpoint's adapter into the fresh engine
    assert len(re.findall(r"sent \d+ tensors", log)) == 3
    full = verl_runs["opd_teacher_grpo"][0]  # the full teacher's teacher phase
    full_sent = {int(b) for b in re.findall(r"sent \d+ tensors, (\d+) B", full.stdout + full.stderr)}
    # the full teacher's sync: every tensor (at the toy's width rank 8 is an eighth of it; a 4B
    # teacher's rank-16 adapter is a 120th, scout plan --config config/paper.yaml)
    assert len(full_sent) == 1 and next(iter(full_sent)) > 4 * _lora_bytes(config, rank)
    print(f"bytes per teacher sync: LoRA r{rank} {sent[0]:,}, full teacher {next(iter(full_sent)):,}")
    # after each sync (phases 2-4: the first follows none; step 2's line may be lost to the kill)
    # the engine serves the trainer's weights
    pattern = r"scout/teacher_engine_trainer_pearson:([-+0-9.e]+)"
    pearson = [float(x) for x in re.findall(pattern, killed + log)]
    assert len(re.findall(pattern, log)) == 2 and min(pearson) > 0.99, pearson
    from safetensors.torch import load_file

    initial = load_file(str(Path(Paths.of(config).model("toy-large")) / "model.safetensors"))
    final = out / "model" / "final-teacher"
    assert not (final / "lora_adapter").exists()  # folded into the weights: the evaluation's model
    # the adapted projections changed, and nothing else (the base is frozen, the head untouched)
    layers = json.loads((final / "config.json").read_text())["num_hidden_layers"]
    where = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
             "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}  # fmt: skip
    adapted = {f"model.layers.{i}.{where[t]}.{t}.weight" for i in range(layers) for t in methods.LORA_TARGETS}
    norms = re.findall(r"scout/teacher_grad_norm:([-+0-9.e]+)", killed + log)
    assert _changed(initial, load_file(str(next(final.glob("*.safetensors"))))) == adapted, (
        f"teacher grad norms {norms}"
    )
    _evaluation_reads(final)
    # keep_checkpoints: exported: step 2 was exported when saved (by the killed run, or by the
    # resumed one's next save where the kill cut its merge) and its checkpoint deleted since
    assert "(when saved)" in killed + log
    assert all((out / "model" / f"step2{s}" / "config.json").exists() for s in ("", "-teacher"))
    assert not (out / "checkpoints" / "global_step_2").exists() and (out / "checkpoints" / "global_step_4").is_dir()
    _evaluation_reads(out / "model" / "step2")


@pytest.mark.skipif(not ALL, reason="SCOUT_VERL_CPU=all (CI: the LoRA teacher runs shared)")
def test_a_lora_teacher_on_a_pool_of_its_own_syncs_its_adapter_without_sleeping_the_engine(cpu_world, verl_runs):
    """The placement the shared run leaves out: three pools, the engine never asleep, the same
    adapter-only sync and the engine serving what the trainer holds."""
    done, _ = verl_runs[LORA_OWN]
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-6000:]
    rank = _lora_spec(cpu_world["config"])["method_cfg"]["scout"]["teacher_lora"]["rank"]
    sent = [int(m[1]) for m in re.findall(r"sent (\d+) tensors, (\d+) B", log)]
    assert sent and set(sent) == {_lora_bytes(cpu_world["config"], rank)}, sent
    pearson = [float(x) for x in re.findall(r"scout/teacher_engine_trainer_pearson:([-+0-9.e]+)", log)]
    assert pearson and min(pearson) > 0.99, pearson
    assert "scout/teacher_engine_asleep_s" not in log


def test_the_gpu_checks_report_reads_every_run_and_its_evaluation(cpu_world, verl_runs):
    """The first GPU node's check (benchmarks/gpu_check.py) reads each of these runs as it reads its
    own on a GPU: every run passes, with verl's step time, the trainers' peak memory, the engines'
    shares, the teacher self-test within its limit, both ends of each teacher sync agreeing and the
    rollout agreeing with the actor; its vLLM evaluation of an export scores every benchmark."""
    cells = []
    for variant in RUN:
        ran, seconds = verl_runs[variant]
        done = ran["resumed"] if isinstance(ran, dict) else ran
        cell = gpu_check.read_cell(variant, cpu_world["root"] / "runs" / variant, done, seconds)
        assert cell.ok, (variant, cell.problems)
        assert cell.step_s > 0 and cell.peak_gb["student"] > 0 and cell.engines["student"] > 0
        assert ("teacher" in cell.peak_gb) == (variant in TEACHER_TRAINERS)
        assert (cell.selftest is None) == (variant == "grpo")
        assert (cell.sent is not None) == (variant in TEACHER_TRAINERS) and (cell.sent in cell.received or not cell.sent)
        assert (cell.rollout_pearson is None) == (variant == "relay_opd")
        cells.append(cell)
    evaluation = verl_runs[EVALUATION]
    assert evaluation["complete"], (cpu_world["root"] / "eval" / f"{EVALUATED}.log").read_text()[-4000:]
    assert set(evaluation["means"]) == {"tm-easy", "tm-hard", "tm-long"} and evaluation["variant"] == EVALUATED
    text = gpu_check.report(cells, {"scout": "needs 3 GPUs"}, evaluation)
    print("\n" + text)
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["cell", "rc", "job"] and len(lines) == 1 + len(RUN) + 1 + len(RUN) + 2
    assert [ln.split(":")[0] for ln in lines[-len(RUN) - 2 : -2]] == RUN
    assert all(ln.endswith("PASS") for ln in lines[-len(RUN) - 2 : -2])
    assert lines[-2] == "scout: NOT CHECKED: needs 3 GPUs" and lines[-1].startswith(f"vLLM evaluation of {EVALUATED}'s export: PASS")
