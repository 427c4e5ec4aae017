"""scout's gloo checkpoint engine (SCOUT's teacher sync on the CPU), driven the way verl's
CheckpointEngineManager drives it, across processes that each already have a default
torch.distributed group of their own (as FSDP workers and CheckpointEngineWorker do): two trainer
ranks (rank 0 sends, rank 1 only walks its generator) and two rollout ranks, two syncs (two
teacher phases; the group is rebuilt each time), buckets small enough that one weight spans three."""

from __future__ import annotations

import asyncio
import pickle
import tempfile
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

pytest.importorskip("verl", reason="needs verl (pip install '.[verl]')")

BUCKET = 4096  # bytes


def weights() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "embed.weight": torch.randn(40, 16, generator=g),  # 2560 B
        "layer.q.weight": torch.randn(16, 16, generator=g),  # 1024 B: does not fit beside it
        "layer.mlp.weight": torch.randn(64, 32, generator=g),  # 8192 B: spans buckets
        "norm.weight": torch.randn(16, generator=g).to(torch.bfloat16),
        "step": torch.tensor([7], dtype=torch.int64),
    }


def _store() -> str:
    """A file for a process's own default group to meet in: no port another test could take between
    choosing it and binding it (a free port's race failed the suite once, EADDRINUSE)."""
    return f"file://{Path(tempfile.mkdtemp(prefix='gloo-sync-')) / 'store'}"


def worker(role: str, index: int, store: str, inbox, others, results, checked: bool = False) -> None:
    import torch.distributed as dist

    from scout.verl.gloo_sync import GlooCheckpointEngine

    if checked:  # the GPU check's checksums at both ends, around the engine (scout.verl.sync_checksum)
        from scout.verl.sync_checksum import checksummed

        GlooCheckpointEngine = checksummed(GlooCheckpointEngine)  # noqa: N806

    dist.init_process_group("gloo", init_method=store, rank=0, world_size=1)
    is_master = role == "actor" and index == 0
    engine = GlooCheckpointEngine(bucket_size=BUCKET, is_master=is_master)
    for round_ in range(2):
        # the master's address, to each process on its own queue, as verl's manager hands it out
        # per sync (one shared queue would let a fast receiver take a slow one's stale address)
        meta = engine.prepare()
        if is_master:
            for q in others:
                q.put(meta)
        else:
            meta = inbox.get()
        actor_kwargs, rollout_kwargs = GlooCheckpointEngine.build_topology(2, 2, [meta, None, None, None])
        kw = actor_kwargs if role == "actor" else rollout_kwargs
        engine.init_process_group(**{k: v[index] for k, v in kw.items()})

        async def run(scale: int = round_ + 1):
            if role == "actor":
                await engine.send_weights((k, v * scale if v.is_floating_point() else v) for k, v in weights().items())
                return None
            return {k: v.clone() async for k, v in engine.receive_weights()}

        got = asyncio.run(run())
        engine.finalize()
        if got is not None:
            results.put((index, round_, pickle.dumps(got)))


def _sync(checked: bool = False) -> list:
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    roles = [("actor", 0), ("actor", 1), ("rollout", 0), ("rollout", 1)]
    inboxes = [ctx.Queue() for _ in roles]
    procs = [
        ctx.Process(
            target=worker, args=(role, i, _store(), inboxes[n], inboxes[1:] if n == 0 else [], results, checked)
        )
        for n, (role, i) in enumerate(roles)
    ]
    for p in procs:
        p.start()
    try:
        got = [results.get(timeout=300) for _ in range(4)]  # 2 receivers x 2 syncs
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
    finally:  # a hung sync must not outlive the test
        for p in procs:
            p.kill()
    return got


def test_gloo_engine_moves_every_weight_exactly():
    got = _sync()
    ref = weights()
    assert sorted((i, r) for i, r, _ in got) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for _index, round_, blob in got:
        received = pickle.loads(blob)
        assert list(received) == list(ref)
        for k, v in ref.items():
            want = v * (round_ + 1) if v.is_floating_point() else v
            assert received[k].dtype == want.dtype and torch.equal(received[k], want), k


def test_checksums_at_both_ends_of_a_sync_agree_with_the_weights(capfd):
    """Wrapped as the GPU check wraps verl's NCCL engine, each sync logs one sender's checksum (rank 0;
    the other trainer rank sits the broadcast out) and one per receiver, all the float64 sum of the
    floating weights sent: 2 x it at the second sync, whose weights are doubled."""
    import re

    assert len(_sync(checked=True)) == 4
    err = capfd.readouterr().err
    # four processes write to one stream: lines can run into each other, so the pattern is tight
    line = r"{} 5 tensors, \d+ B in [0-9.]+ s, checksum (-?[0-9.]+)"
    sent, received = ([float(x) for x in re.findall(line.format(w), err)] for w in ("sent", "received"))
    total = sum(float(v.double().sum()) for v in weights().values() if v.is_floating_point())
    assert sent == pytest.approx([total, 2 * total], abs=1e-5), err[-3000:]
    assert sorted(received) == pytest.approx(sorted([total, total, 2 * total, 2 * total]), abs=1e-5)
