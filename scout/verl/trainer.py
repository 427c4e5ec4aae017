"""The trainers of scout's verl backend (subclasses of verl's V1 synchronous trainer) and the Ray
task runner that builds them: ``ScoutTrainer`` for the methods that train the teacher,
``PruneTrainer`` for Prune-OPD's adaptive response budget, verl's own trainer for the rest, and
their served variants (``ServedTeacher``: a frozen teacher scored by a server, no engine of its own).

The student side is verl's own OPD (``distillation.*``: K1 advantage in policy-gradient mode,
scored by the teacher's inference engine on its own pool). ``ScoutTrainer`` adds the teacher's
trainer, a second FSDP worker group on a pool of its own (``scout.teacher_train``) or on the
engine's (``teacher_trainer: shared``), with a frozen reference copy for the KL to its initial
weights. Every ``interval`` student steps it runs the teacher phase (``scout.verl.teacher_phase``):
read the step's student batch back from TransferQueue; sample K continuations of each student
prefix from the teacher's engine (per-request budgets); grade prefix + continuation in one batch
(``scout.verl.reward.grade_batch``); take the old and reference log-probs, ``scout_grpo``
advantages and one update of the teacher worker group (a shared trainer while the engine sleeps,
vLLM's level 1, its own state in host memory at all other times); then push the new weights into
the engine (a ``CheckpointEngineManager`` over the teacher's replicas: NCCL, or gloo through host
memory for a shared trainer), so the next student steps are scored by the updated teacher. A LoRA
teacher (``methods.scout.teacher_lora``) pushes its adapter alone (``scout.verl.lora_sync``) and is
its own reference (its base, adapter off).

Everything but the worker-group calls is a pure function tested on CPU (``teacher_phase``,
``checkpoints``; ``watch``, which stops a job whose rollout keeps failing); the classes run in CI
on verl's CPU path (tests/verl/test_verl_cpu.py).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from contextlib import contextmanager
from uuid import uuid4

import numpy as np
import ray
import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from scout import algorithms as alg
from scout.methods import METHODS
from scout.verl import checkpoints as ck
from scout.verl import parts
from scout.verl import teacher_phase as tp
from scout.verl.env import TEACHER_DIR, method_section
from scout.verl.plugin import BUDGET_KEY
from scout.verl.reward import grade_batch
from scout.verl.watch import RolloutWatch

log = logging.getLogger(__name__)

TEACHER_POOL = "scout_teacher_train_pool"


# -- the trainer (GPU only) --------------------------------------------------------------------------------


def trainer_class(cfg: DictConfig):
    """The trainer a method's parts name (``scout.verl.parts``; ``TRAINERS``), verl's own sync
    trainer with scout's checkpoint retention where none does; a cell with a served teacher gets
    the served variant."""
    cls = TRAINERS[parts.first(METHODS[cfg.scout.method], "trainer")]
    return SERVED.get(cls, cls) if cfg.scout.get("teacher_served") else cls


try:
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync as _Base
except ImportError:  # verl without its verl-core extra: the pure pieces above still work
    _Base = object


class RetainCheckpoints(RolloutWatch, _Base):
    """Checkpoint retention that a kill cannot break: verl's own (``max_actor_ckpt_to_keep``)
    deletes the previous checkpoint of each role as soon as that role's new one is written, before
    the tracker names the new step, so a job killed in between (the teacher saved, the student not)
    could resume from nothing whole. The config turns verl's off (None); after verl has written
    the tracker for the new step, this deletes every other ``global_step_N`` but the ones the grid
    evaluates (``scout.keep_steps``): intermediate checkpoints hold optimizer state, so keeping
    them all would cost terabytes on the paper grid. With ``training.keep_checkpoints: exported``
    each evaluated one is exported as soon as it is saved and deleted with the rest."""

    def _save_checkpoint(self):
        super()._save_checkpoint()
        root = self.config.trainer.default_local_dir
        if ck.tracked_step(root) != self.global_steps:  # the save did not complete: delete nothing
            return
        keep = {int(s) for s in self.config.scout.get("keep_steps", [])}
        if self.config.scout.get("export_when_saved"):  # training.keep_checkpoints: exported
            from scout.verl.export import export_saved

            export_saved(self.config.scout.method, root, keep)
            keep = set()
        for folder in ck.stale_checkpoints(root, self.global_steps, keep):
            shutil.rmtree(folder, ignore_errors=True)


class TeacherSelfTest(RetainCheckpoints):
    """The teacher self-test (``scout.verl.self_test``) before the first update of the job and,
    where the teacher trains, the first after each sync: a few of the step's responses, the
    teacher's log-probs the loss is about to read against a reference forward, logged as
    ``scout/teacher_selftest_*``; above its limit the job stops, naming both numbers."""

    self_test_due = True

    def _update_actor(self, batch, metrics: dict):
        if self.self_test_due and self.config.distillation.enabled:
            metrics.update(self._self_test(batch))
            self.self_test_due = False
        return super()._update_actor(batch, metrics)

    def _self_test(self, batch) -> dict:
        import transfer_queue as tq

        from scout.verl import self_test as st

        keys = [k for k, t in zip(batch.keys, batch.tags, strict=True) if not t.get("is_padding", False)]
        fields = ["prompts", "responses", "teacher_ids", "teacher_logprobs", "old_log_probs", "response_mask"]
        td = tq.kv_batch_get(keys=keys[: alg.SELF_TEST_RESPONSES], partition_id=batch.partition_id, select_fields=fields)
        prompts = [p.tolist() for p in td["prompts"].unbind()]
        responses = [r.tolist() for r in td["responses"].unbind()]
        rows = [st.engine_rows(i, lp, len(p), len(r)) for i, lp, p, r in
                zip(td["teacher_ids"].unbind(), td["teacher_logprobs"].unbind(), prompts, responses, strict=True)]  # fmt: skip
        t0 = time.perf_counter()
        at_ids, sampled = self._teacher_reference_logp(prompts, responses, [ids for ids, _ in rows])
        found = st.check([lp for _, lp in rows], at_ids, sampled, list(td["old_log_probs"].unbind()),
                         list(td["response_mask"].unbind()), f"at step {self.global_steps}")  # fmt: skip
        return {f"scout/{k}": v for k, v in found.items()} | {"scout/teacher_selftest_s": time.perf_counter() - t0}

    def _teacher_reference_logp(self, prompts, responses, ids):
        """A frozen teacher's reference: its weights in float32 on this host, loaded for the test alone."""
        from transformers import AutoModelForCausalLM

        from scout.verl import self_test as st

        path = self.config.distillation.teacher_models.teacher_model.model_path
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        try:
            return st.hf_reference(model, prompts, responses, ids)
        finally:
            del model


class StudentTrainer(TeacherSelfTest):
    """verl's sync PPO trainer, as every method without a teacher phase or a budget runs it."""


class ScoutTrainer(TeacherSelfTest):
    """verl's sync PPO trainer plus SCOUT's teacher phase (see the module docstring)."""

    def _init_resource_pool_mgr(self):
        super()._init_resource_pool_mgr()
        mgr, tt = self.resource_pool_manager, self.config.scout.teacher_train
        if tp.shared_trainer(self.config):  # one worker group more on each of the engine's bundles
            from verl.trainer.ppo.utils import Role

            mgr.mapping["scout_teacher"] = mgr.mapping[Role.TeacherModel]
        else:
            mgr.resource_pool_spec[TEACHER_POOL] = [tt.n_gpus_per_node] * tt.nnodes
            mgr.mapping["scout_teacher"] = TEACHER_POOL

    def _load_checkpoint(self):
        # verl's _setup ends with _load_checkpoint: the teacher's workers must exist by then
        self._init_teacher_workers()
        super()._load_checkpoint()
        if self.global_steps > 0:
            path = f"{ck.step_dir(self.config, self.global_steps)}/{TEACHER_DIR}"
            self.teacher_wg.load_checkpoint(path, None, False)

    def _init_teacher_workers(self):
        from verl.checkpoint_engine import CheckpointEngineManager
        from verl.single_controller.ray import RayClassWithInitArgs, RayWorkerGroup
        from verl.single_controller.ray.base import create_colocated_worker_cls
        from verl.workers.config import CheckpointEngineConfig
        from verl.workers.engine_workers import ActorRolloutRefWorker

        tcfg = tp.teacher_worker_config(self.config)
        worker = ray.remote(ActorRolloutRefWorker)
        classes = {"teacher_actor": RayClassWithInitArgs(cls=worker, config=tcfg, role="actor")}
        self.teacher_lora = tp.teacher_lora(self.config) is not None
        if not self.teacher_lora:  # a LoRA teacher's reference is its own base (adapter off): no copy
            classes["teacher_ref"] = RayClassWithInitArgs(cls=worker, config=tcfg, role="ref")
        pool = self.resource_pool_manager.get_resource_pool("scout_teacher")
        groups = RayWorkerGroup(
            resource_pool=pool,
            ray_cls_with_init=create_colocated_worker_cls(class_dict=classes),
            device_name=self.config.trainer.device,
        ).spawn(prefix_set=classes.keys())
        self.teacher_wg, self.teacher_ref_wg = groups["teacher_actor"], groups.get("teacher_ref")
        for wg in (self.teacher_wg, self.teacher_ref_wg):
            if wg is not None:
                wg.init_model()
        self.teacher_replicas = self.teacher_model_manager.teacher_model_managers["default"].rollout_replicas
        _bind_teacher_servers(self.teacher_replicas)
        self.teacher_sync = CheckpointEngineManager(
            config=CheckpointEngineConfig(
                backend=tcfg.rollout.checkpoint_engine.backend,
                update_weights_bucket_megabytes=tcfg.rollout.checkpoint_engine.update_weights_bucket_megabytes,
                custom_backend_module=tcfg.rollout.checkpoint_engine.custom_backend_module,
            ),
            actor_wg=self.teacher_wg,
            replicas=self.teacher_replicas,
        )

    def on_init_end(self):
        super().on_init_end()
        if self.global_steps > 0:  # resumed: the engine still serves the initial teacher
            self.teacher_sync.update_weights(self.global_steps)

    def _save_checkpoint(self):
        # the teacher first: verl writes its tracker file last, so a step it names has both; old
        # checkpoints go only after that (RetainCheckpoints), never by verl's manager (None)
        path = f"{ck.step_dir(self.config, self.global_steps)}/{TEACHER_DIR}"
        self.teacher_wg.save_checkpoint(path, None, self.global_steps, None)
        super()._save_checkpoint()

    def step(self, metrics: dict, timing_raw: dict):
        batch = super().step(metrics, timing_raw)
        if tp.teacher_step_due(self.global_steps, method_section("scout", self.config)["interval"]):
            import transfer_queue as tq

            keep = [i for i, t in enumerate(batch.tags) if not t.get("is_padding", False)]
            fields = ["uid", "prompts", "responses", "data_source", "reward_model", "extra_info"]
            td = tq.kv_batch_get(
                keys=[batch.keys[i] for i in keep], partition_id=batch.partition_id, select_fields=fields
            )
            metrics.update(self.teacher_phase(tp.batch_from_tq(td, self.tokenizer.pad_token_id)))
        return batch

    def teacher_phase(self, student) -> dict:
        from verl.trainer.ppo.ray_trainer import compute_advantage
        from verl.utils import tensordict_utils as tu
        from verl.workers.utils.padding import no_padding_2_padding

        cfg, tok = self.config, self.tokenizer
        sc, width = method_section("scout", cfg), cfg.actor_rollout_ref.rollout.response_length
        ratio = tp.teacher_ratio(cfg, self.global_steps)
        req = tp.continuation_requests(student, ratio, sc["k"], tok.eos_token_id, tok.pad_token_id, width)
        conts, engine_logp = self._generate(req)
        nt = req.non_tensor_batch
        texts = tp.graded_texts(tok, nt[tp.PREFIX_IDS], conts)
        rewards = grade_batch(
            nt["data_source"], texts, [rm["ground_truth"] for rm in nt["reward_model"]], nt["extra_info"]
        )
        batch = tp.teacher_train_batch(req, conts, rewards, tok.pad_token_id, width)
        temperature = cfg.actor_rollout_ref.rollout.temperature
        td = tp.worker_batch(batch, calculate_entropy=False, compute_loss=False, temperature=temperature)
        with self._engine_asleep() as slept:
            old = no_padding_2_padding(tu.get(self.teacher_wg.compute_log_prob(td), "log_probs"), td).float()
            ref = no_padding_2_padding(tu.get(self._teacher_reference(td), "log_probs"), td).float()
            batch.batch["old_log_probs"], batch.batch["ref_log_prob"] = old, ref
            agreement = tp.engine_agreement(old, [len(p) for p in nt[tp.PREFIX_IDS]], engine_logp)
            batch = compute_advantage(batch, adv_estimator="scout_grpo", config=None)
            size = len(batch)
            td = tp.worker_batch(
                batch, calculate_entropy=False, distillation_use_topk=False, distillation_only=False,
                global_batch_size=size, mini_batch_size=size, epochs=1, seed=cfg.actor_rollout_ref.actor.data_loader_seed,
                dataloader_kwargs={"shuffle": False}, compute_loss=True, temperature=temperature,
            )  # fmt: skip
            out = tu.get(self.teacher_wg.update_actor(td), "metrics")
        self.teacher_sync.update_weights(self.global_steps)
        self.self_test_due = True  # the next step's scores come from the weights just sent
        return {
            **slept,
            "scout/teacher_update": 1,
            "scout/teacher_prefix_ratio": ratio,
            "scout/teacher_reward": float(np.mean(rewards)),
            "scout/teacher_cont_length": float(np.mean([len(c) for c in conts])),
            # the engine's probabilities of its own samples against the trainer's, before this
            # update: near 1 when the previous sync delivered the trainer's weights
            "scout/teacher_engine_trainer_pearson": agreement,
            **tp.teacher_update_metrics(out),
        }

    @contextmanager
    def _engine_asleep(self):
        """A shared trainer's GPUs: the teacher's engine sleeps while the trainer computes and wakes
        before the sync (verl's colocated replicas: ``engine.sleep(level=1)``, then ``wake_up``).
        Yields the metrics it fills in: the seconds asleep and the seconds sleep and wake-up took."""
        slept: dict = {}
        if not tp.shared_trainer(self.config):
            yield slept
            return

        def each(call: str) -> float:
            async def run():
                await asyncio.gather(*[getattr(r, call)() for r in self.teacher_replicas])

            t0 = time.perf_counter()
            asyncio.run(run())
            return time.perf_counter() - t0

        slept["scout/teacher_engine_sleep_s"] = each("sleep")
        t0 = time.perf_counter()
        try:
            yield slept
        finally:
            # verl offloads the optimizer's state without emptying the allocator's cache
            # (verl/utils/fsdp_utils.py:241-249): hand those blocks back before vLLM asks for its own
            ray.get([w.__ray_call__.remote(_release_cached_memory) for w in self.teacher_wg.workers])
            slept["scout/teacher_engine_asleep_s"] = time.perf_counter() - t0
            slept["scout/teacher_engine_wake_s"] = each("wake_up")

    def _teacher_reference_logp(self, prompts, responses, ids):
        """The teacher's trainer holds the weights the engine was sent: its log-probs of the sampled
        tokens (at temperature 1, as the engine scores) are the reference; SCOUT's loss reads no
        top-k, so the engine's rows are the sampled tokens too."""
        from verl.utils import tensordict_utils as tu
        from verl.workers.utils.padding import no_padding_2_padding

        if any(i.shape[-1] != 1 for i in ids):
            raise RuntimeError("SCOUT's teacher self-test compares the sampled tokens' log-probs; the engine sent a top-k")
        ranks = tp.data_parallel_size(self.teacher_wg)
        td = tp.self_test_batch(prompts, responses, self.tokenizer.pad_token_id, ranks)
        with self._engine_asleep():
            logp = no_padding_2_padding(tu.get(self.teacher_wg.compute_log_prob(td), "log_probs"), td).float()
        sampled = [logp[i, : len(r)] for i, r in enumerate(responses)]
        return [x.unsqueeze(-1) for x in sampled], sampled

    def _teacher_reference(self, td):
        """Log-probs of the batch ``td`` (the one the old log-probs were computed on) under the initial
        teacher: its frozen copy, or a LoRA teacher's base (verl's own reference path for LoRA actors:
        ``no_lora_adapter`` runs the engine with the adapter off)."""
        if not self.teacher_lora:
            return self.teacher_ref_wg.compute_ref_log_prob(td)
        from verl.utils import tensordict_utils as tu

        tu.assign_non_tensor(td, no_lora_adapter=True)
        return self.teacher_wg.compute_log_prob(td)

    def _generate(self, req) -> tuple[list[list[int]], list[list[float]]]:
        """The engine's continuations and its log-probs of their tokens."""
        client = self.get_teacher_client()["default"]
        nt = req.non_tensor_batch

        async def all_requests():
            calls = [
                client.generate(uuid4().hex, prompt_ids=list(p),
                                sampling_params={**tp.sampling_params(self.config, m), "logprobs": True})  # fmt: skip
                for p, m in zip(nt["raw_prompt_ids"], nt[tp.MAX_TOKENS], strict=True)
            ]
            return await asyncio.gather(*calls)

        outs = asyncio.run(all_requests())
        return [list(o.token_ids) for o in outs], [list(o.log_probs or []) for o in outs]


class PruneTrainer(TeacherSelfTest):
    """verl's sync PPO trainer plus Prune-OPD's adaptive response budget L: each prompt batch
    carries L to the rollout (``scout.verl.agent_loop``), the actor's loss gets L and counts the
    samples that used it up (``plugin.budget_metrics``), and L moves by ``alg.update_budget``."""

    def __init__(self, config: DictConfig):
        super().__init__(config)
        self.prune_cfg = method_section("prune_opd", config)
        self.budget = alg.BudgetState(int(self.prune_cfg["budget"]["initial"]))

    def _load_checkpoint(self):
        super()._load_checkpoint()
        if self.global_steps > 0:
            self.budget = ck.load_budget(ck.step_dir(self.config, self.global_steps))

    def _save_checkpoint(self):
        ck.save_budget(ck.step_dir(self.config, self.global_steps), self.budget)  # before verl writes its tracker file
        super()._save_checkpoint()

    def _next_train_batch(self, num_prompts: int | None = None):
        from verl.utils import tensordict_utils as tu

        batch = super()._next_train_batch(num_prompts)
        tu.assign_non_tensor_data(batch, tp.MAX_TOKENS, self.budget.length)
        return batch

    def _update_actor(self, batch, metrics: dict):
        batch.extra_info[BUDGET_KEY] = self.budget.length
        batch = super()._update_actor(batch, metrics)
        self.budget, log = ck.prune_budget_step(self.budget, metrics, self.prune_cfg)
        metrics.update(log)
        return batch


class ServedTeacher:
    """A frozen teacher served by URL (``scout.teacher_server``; the driver puts the server in
    ``scout.teacher_server``): verl's trainer without the teacher's pool and engines, distillation
    left on for its loss and the agent loop's scoring, whose client asks the server
    (``scout.verl.teacher_client``). Put before a trainer class: ``class X(ServedTeacher, Trainer)``."""

    def _init_resource_pool_mgr(self):
        with _distillation_off(self.config):  # verl would ask Ray for a teacher pool (distillation.nnodes 0)
            super()._init_resource_pool_mgr()

    def _setup(self):
        from verl.utils.config import omega_conf_to_dataclass

        self.use_teacher_policy = False  # verl's _setup then starts no teacher engine of its own
        try:
            super()._setup()
        finally:
            self.use_teacher_policy = True
        self.distillation_config = omega_conf_to_dataclass(self.config.distillation)  # the loss reads it

    def get_teacher_client(self) -> dict:
        from scout.verl.teacher_client import ServedTeacherClient

        server = self.config.scout.teacher_server
        user = server.get("user", "")
        return {key: ServedTeacherClient(server.url, server.model, user) for key in self.distillation_config.teacher_models}


@contextmanager
def _distillation_off(cfg: DictConfig):
    with open_dict(cfg):
        cfg.distillation.enabled = False
        try:
            yield
        finally:
            cfg.distillation.enabled = True


class ServedStudentTrainer(ServedTeacher, StudentTrainer):
    """OPD, ESR and OPTR scored by a teacher server."""


class ServedPruneTrainer(ServedTeacher, PruneTrainer):
    """Prune-OPD scored by a teacher server."""


# the trainers a method's parts may name (scout.verl.parts), and each one's variant with a served teacher
TRAINERS = {"": StudentTrainer, "scout": ScoutTrainer, "prune": PruneTrainer}
SERVED = {StudentTrainer: ServedStudentTrainer, PruneTrainer: ServedPruneTrainer}


def _release_cached_memory(_worker) -> None:
    """In a trainer worker: finish pending copies and return the caching allocator's free blocks.
    Not verl's ``aggressive_empty_cache`` (verl/utils/memory_utils.py:32): it empties the cache
    before it synchronises, so blocks the offload's non-blocking copies still read stay reserved."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def _bind_teacher_servers(replicas) -> None:
    """verl's weight receiver looks its vLLM server up by the student's naming scheme; point each
    of the teacher's receivers at the teacher's own server instead."""

    def bind(worker, handle):
        worker.server_adapter.server_handle = handle

    for rep in replicas:
        for i, w in enumerate(rep.workers):
            server = rep.servers[i // rep.gpus_per_replica_node]
            ray.get(w.__ray_call__.remote(bind, server))


@ray.remote
class ScoutTaskRunner:
    """verl's TaskRunnerV1.run with the trainer and agent-loop manager chosen per method (verl's
    runner resolves its trainer through a registry in the Ray actor's process, which a driver
    cannot extend)."""

    def run(self, config: DictConfig) -> int:
        import transfer_queue as tq
        from verl.utils.logging_utils import configure_verl_logging

        configure_verl_logging()
        with open_dict(config):
            config.transfer_queue.enable = True
        OmegaConf.resolve(config)
        tq.init(config.transfer_queue)
        trainer, ok = None, False
        try:
            trainer = trainer_class(config)(config=config)
            trainer.init()
            loops = parts.agent_loop_manager(config.scout.method).create(
                config=config,
                llm_client=trainer.get_llm_client(),
                teacher_client=trainer.get_teacher_client(),
                reward_loop_worker_handles=trainer.get_reward_handles(),
            )
            trainer.fit(loops)
            ok = True
            return trainer.global_steps
        finally:
            try:
                if getattr(trainer, "logger", None) is not None:
                    trainer.logger.finish(exit_code=0 if ok else 1)
            finally:
                tq.close()
