"""A ``gloo`` checkpoint engine for verl 0.9.1: weight sync between a trainer worker group and
rollout replicas on *separate* resources (SCOUT's teacher trainer -> the teacher's vLLM engine)
without CUDA, cupy or NCCL.

verl's ``nccl`` engine (verl/checkpoint_engine/nccl_checkpoint_engine.py) imports cupy at module
level and moves buckets through ``ray.util.collective`` NCCL groups on device buffers; none of it
exists on CPU. This engine keeps its protocol (verl's ``CheckpointEngine`` ABC, driven by
``CheckpointEngineManager.update_weights``: prepare -> build_topology -> init_process_group ->
send_weights / receive_weights -> finalize) and swaps the transport:

* a *stateless* gloo group per sync: a ``TCPStore`` served by trainer rank 0 and a
  ``ProcessGroupGloo`` over it. Stateless because every process already has a default
  torch.distributed group of its own (FSDP's world on the trainer side, the rollout's
  ``CheckpointEngineWorker`` world on the other), so ``ray.util.collective``'s gloo group, which
  re-uses the default group when one exists, cannot be used;
* host buffers; the bucket's metadata (verl's ``TensorMeta`` list) is pickled and broadcast on
  the same group before the bucket, instead of the nccl engine's ZMQ PUB/SUB side channel.

Selected exactly as NCCL is: ``checkpoint_engine.backend: gloo`` on the sending side
(``actor_rollout_ref.rollout.checkpoint_engine`` of the trainer's worker config, read by
``ActorRolloutRefWorker``) and on the receiving replicas (``...inference.checkpoint_engine``, read
by ``CheckpointEngineWorker``), plus ``CheckpointEngineManager(config=CheckpointEngineConfig(backend="gloo"))``
in the trainer. The module must be imported wherever the engine is built, before it is built:
``checkpoint_engine.custom_backend_module`` (verl imports it in both workers and in the manager,
verl/checkpoint_engine/base.py:336 and :417, verl/workers/engine_workers.py:685), or the CPU
module itself through ``VERL_USE_EXTERNAL_MODULES``.

One sender (trainer rank 0, which holds full tensors from ``get_per_tensor_param``); the other
trainer ranks walk the generator (producing each full tensor is collective over FSDP) and sit the
broadcast out, as the nccl engine's single-sender mode does.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import sys
import time
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from verl.checkpoint_engine.base import (
    CheckpointEngine,
    CheckpointEngineRegistry,
    merge_weight_chunks,
    split_weight_chunks,
)

from scout.verl.env import SYNC_CHECKSUM_ENV

TIMEOUT = timedelta(seconds=int(os.environ.get("VERL_GLOO_SYNC_TIMEOUT", "600")))
# SCOUT_SYNC_CHECKSUM=1: each side logs the float64 sum of every tensor it sent / received
CHECKSUM = os.environ.get(SYNC_CHECKSUM_ENV) == "1"


def _log(msg: str) -> None:
    print(f"[gloo-sync] pid {os.getpid()}: {msg}", file=sys.stderr, flush=True)


@dataclass
class GlooMaster:
    host: str
    port: int


def _node_ip() -> str:
    try:
        import ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address().strip("[]")
    except Exception:  # noqa: BLE001 - outside Ray (tests): loopback
        pass
    return "127.0.0.1"


@CheckpointEngineRegistry.register("gloo")
class GlooCheckpointEngine(CheckpointEngine):
    """Args as verl passes them: ``bucket_size`` (bytes), ``is_master`` (trainer rank 0)."""

    def __init__(self, bucket_size: int, is_master: bool = False, **_kwargs) -> None:
        self.bucket_size = bucket_size
        self.is_master = is_master
        self.rank = None
        self.pg = None
        self.store = None

    # -- topology ------------------------------------------------------------------------------

    def prepare(self) -> GlooMaster | None:
        self.buffers = [torch.empty(self.bucket_size, dtype=torch.uint8) for _ in range(2)]
        if not self.is_master:
            return None
        # The store listens from here on, on a port the system picks: a port found free and let go
        # until the group forms can be taken by another process meanwhile (EADDRINUSE in a busy CI)
        host = _node_ip()
        self.store = dist.TCPStore(host, 0, None, is_master=True, timeout=TIMEOUT, wait_for_workers=False)
        self.master = GlooMaster(host, self.store.port)
        return self.master

    @classmethod
    def build_topology(cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list):
        master = metadata[0]
        assert isinstance(master, GlooMaster), "trainer rank 0 must be the gloo checkpoint engine's master"
        world = 1 + rollout_world_size
        actor = {
            "rank": [0] + [-1] * (actor_wg_world_size - 1),
            "world_size": [world] * actor_wg_world_size,
            "master": [master] * actor_wg_world_size,
        }
        rollout = {
            "rank": list(range(1, world)),
            "world_size": [world] * rollout_world_size,
            "master": [master] * rollout_world_size,
        }
        return actor, rollout

    def init_process_group(self, rank: int, world_size: int, master: GlooMaster):
        self.rank, self.world_size = rank, world_size
        if rank < 0:
            return
        if rank != 0:  # rank 0 serves the store it opened in prepare()
            self.store = dist.TCPStore(master.host, master.port, world_size, is_master=False, timeout=TIMEOUT)
        self.pg = dist.ProcessGroupGloo(self.store, rank, world_size, TIMEOUT)

    def finalize(self):
        self.pg = self.store = None
        self.buffers = None

    # -- transfer ------------------------------------------------------------------------------

    def _broadcast_bucket(self, bucket: torch.Tensor | None, meta: dict | None) -> tuple[dict, torch.Tensor]:
        """Rank 0: send ``meta`` then ``bucket``; others: receive them (blocking; run in a thread)."""
        payload = pickle.dumps(meta) if self.rank == 0 else b""
        size = torch.tensor([len(payload)], dtype=torch.int64)
        self.pg.broadcast(size, 0).wait()
        raw = (
            torch.frombuffer(bytearray(payload), dtype=torch.uint8)
            if self.rank == 0
            else torch.empty(int(size), dtype=torch.uint8)
        )
        self.pg.broadcast(raw, 0).wait()
        if self.rank != 0:
            meta = pickle.loads(raw.numpy().tobytes())
            bucket = bucket[: meta["length"]]
        if meta["length"]:
            self.pg.broadcast(bucket, 0).wait()
        return meta, bucket

    @torch.no_grad()
    async def send_weights(self, weights, global_steps: int | None = None):
        if self.rank is None or self.rank < 0:  # not in the group: still walk the collective generator
            for _ in weights:
                pass
            return {}
        assert self.rank == 0, "rollout workers do not send"
        t0, stats = time.perf_counter(), {"tensors": 0, "bytes": 0, "sum": 0.0}

        def counted(ws):
            for name, w in ws:
                stats["tensors"] += 1
                stats["bytes"] += w.nbytes
                if CHECKSUM and w.is_floating_point():
                    stats["sum"] += float(w.double().sum())
                yield name, w

        buf, offset, meta = self.buffers[0], 0, {}
        async for tm, chunk in split_weight_chunks(counted(weights), self.bucket_size):
            if offset + tm.chunk_size > self.bucket_size:
                await asyncio.to_thread(
                    self._broadcast_bucket, buf[:offset], {"bucket_meta": meta, "is_last": False, "length": offset}
                )
                offset, meta = 0, {}
            tm.offset = offset
            meta[tm.name] = tm
            buf[offset : offset + tm.chunk_size].copy_(chunk.reshape(-1).to("cpu"))
            offset += tm.chunk_size
        await asyncio.to_thread(
            self._broadcast_bucket, buf[:offset], {"bucket_meta": meta, "is_last": True, "length": offset}
        )
        _log(
            f"sent {stats['tensors']} tensors, {stats['bytes']} B to {self.world_size - 1} receivers in "
            f"{time.perf_counter() - t0:.2f} s" + (f", checksum {stats['sum']:.6f}" if CHECKSUM else "")
        )
        return {}

    @torch.no_grad()
    async def receive_weights(self, global_steps: int | None = None):
        t0, n, nbytes, total = time.perf_counter(), 0, 0, 0.0
        async for name, weight in merge_weight_chunks(self._chunks(), self.bucket_size):
            n, nbytes = n + 1, nbytes + weight.nbytes
            if CHECKSUM and weight.is_floating_point():
                total += float(weight.double().sum())
            yield name, weight
        _log(
            f"rank {self.rank} received {n} tensors, {nbytes} B in {time.perf_counter() - t0:.2f} s"
            + (f", checksum {total:.6f}" if CHECKSUM else "")
        )

    async def _chunks(self):
        assert self.rank is not None and self.rank > 0, "only rollout workers receive"
        i, last = 0, False
        while not last:
            # two buffers: the tensors yielded from one stay valid while the next bucket arrives
            meta, bucket = await asyncio.to_thread(self._broadcast_bucket, self.buffers[i % 2], None)
            last = meta["is_last"]
            for tm in meta["bucket_meta"].values():
                yield tm, bucket[tm.offset : tm.offset + tm.chunk_size]
            i += 1
