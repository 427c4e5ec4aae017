"""Checksums at both ends of SCOUT's teacher weight sync on GPUs: verl's ``nccl`` checkpoint engine
with each side logging the float64 sum of every floating tensor it sent or received, in the lines
scout's ``gloo`` engine logs (``scout.verl.gloo_sync``), so that the first GPU node's check
(``benchmarks/gpu_check.py``) compares them as CI compares gloo's.

Selected by ``SCOUT_SYNC_CHECKSUM=1`` in a job's environment (``scout.verl.config``: backend
``nccl_checked``, this module as the ``custom_backend_module`` verl imports where it builds an
engine); summing every tensor costs a pass over the weights, so the grid's jobs leave it off.
"""

from __future__ import annotations

import os
import sys
import time

import torch
from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry

from scout.verl.env import SYNC_CHECKSUM_ENGINE as NAME


def _log(msg: str) -> None:
    print(f"[sync-checksum] pid {os.getpid()}: {msg}", file=sys.stderr, flush=True)


def checksummed(base: type[CheckpointEngine]) -> type[CheckpointEngine]:
    """``base`` with each end's checksum logged: the sender (rank 0) over the tensors it is handed,
    each receiver over the tensors it yields to the engine."""

    class Checksummed(base):
        @torch.no_grad()
        async def send_weights(self, weights, global_steps: int | None = None):
            stats = {"tensors": 0, "bytes": 0, "sum": 0.0}
            t0 = time.perf_counter()

            def counted(ws):
                for name, w in ws:
                    stats["tensors"] += 1
                    stats["bytes"] += w.nbytes
                    if w.is_floating_point():
                        stats["sum"] += float(w.double().sum())
                    yield name, w

            out = await super().send_weights(counted(weights), global_steps)
            if self.rank == 0:
                _log(f"sent {stats['tensors']} tensors, {stats['bytes']} B in {time.perf_counter() - t0:.2f} s, "
                     f"checksum {stats['sum']:.6f}")  # fmt: skip
            return out

        @torch.no_grad()
        async def receive_weights(self, global_steps: int | None = None):
            n, nbytes, total, t0 = 0, 0, 0.0, time.perf_counter()
            async for name, w in super().receive_weights(global_steps):
                n, nbytes = n + 1, nbytes + w.nbytes
                if w.is_floating_point():
                    total += float(w.double().sum())
                yield name, w
            _log(f"rank {self.rank} received {n} tensors, {nbytes} B in {time.perf_counter() - t0:.2f} s, "
                 f"checksum {total:.6f}")  # fmt: skip

    Checksummed.__name__ = Checksummed.__qualname__ = f"Checksummed{base.__name__}"
    return Checksummed


def _register() -> None:
    try:  # cupy and CUDA: present on GPU installs only
        from verl.checkpoint_engine.nccl_checkpoint_engine import NCCLCheckpointEngine
    except ImportError:
        return
    if NAME not in CheckpointEngineRegistry._registry:
        CheckpointEngineRegistry.register(NAME)(checksummed(NCCLCheckpointEngine))


_register()
