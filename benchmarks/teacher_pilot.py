"""Pilot: can the toy teacher learn from the student's prefixes? Run before the grid.

SCOUT's teacher phase alone, with the grid's settings (the trainer's own ``teacher_step``: K
continuations of every prefix, GRPO with the KL to the initial teacher, the prefix curriculum),
on the *initial* student's prefixes: as many updates as a SCOUT run makes, the student frozen.
It prints:

- per prefix ratio, the share of informative GRPO groups (rewards that differ) and of prefixes
  that already hold the final answer;
- the teacher's continuation accuracy on held-out fixed prefixes of the initial student, before
  and after, per ratio;
- the teacher's accuracy on its own (held-out prompts, evaluation sampling), before and after.

It says nothing about SCOUT against OPD: that is what the grid tests.

    python -m benchmarks.teacher_pilot [--configfile config/config.yaml] [--setting toy-l-s-math]

The toy world's models must exist (``snakemake --cores 2 results/toy/models/...``).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from scout.reproducibility import pin_numerics

pin_numerics()  # before torch is imported: the grid's code paths, so that the pilot computes the grid's digits

import torch  # noqa: E402

from scout.toy.tasks import RESTART  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def continuation_accuracy(tr, teacher, rows, responses, ratios, k, sampling, seed) -> dict[float, tuple[float, float]]:
    """ratio -> (accuracy of k teacher continuations of each fixed prefix, share of prefixes that
    already hold the answer), prefixes cut as the trainer cuts them."""
    from scout import algorithms as alg
    from scout.embedded.sampling import Sampling, sample

    sc = tr.spec["method_cfg"]["scout"]
    out = {}
    for i, ratio in enumerate(ratios):
        prompts, cuts, graded, committed = [], [], [], 0
        for row, resp in zip(rows, responses, strict=True):
            body = resp[:-1] if resp and resp[-1] == tr.eos else resp
            reasoning = tr.reasoning_length(body)
            length = reasoning if sc.get("split", "response") == "reasoning" else len(body)
            cut = body[: int(alg.split_points(torch.tensor([length]), ratio)[0])]
            committed += len(cut) > reasoning
            prompts += [tr.prompt_ids(row) + cut] * k
            cuts += [cut] * k
            graded += [row] * k
        budgets = [tr.spec["max_response_length"] - len(c) for c in cuts]
        g = torch.Generator().manual_seed(seed * 1009 + i)
        s = Sampling(sampling["max_new_tokens"], sampling["temperature"], sampling["top_p"])
        conts = sample(teacher, prompts, s, tr.eos, tr.pad, g, budgets)
        texts = [tr.decode(x) for x in conts]
        verdicts = tr.grader.grade([tr.decode(c + x) for c, x in zip(cuts, conts, strict=True)], graded)
        looks_back = sum(RESTART in t for t in texts) / len(texts)  # the teacher's late self-check
        out[ratio] = (sum(verdicts) / len(verdicts), committed / len(rows), looks_back)
    return out


def own_accuracy(tr, teacher, rows, k, sampling, seed) -> float:
    from scout.embedded.sampling import Sampling, sample

    prompts = [tr.prompt_ids(r) for r in rows for _ in range(k)]
    s = Sampling(sampling["max_new_tokens"], sampling["temperature"], sampling["top_p"])
    conts = sample(teacher, prompts, s, tr.eos, tr.pad, torch.Generator().manual_seed(seed))
    verdicts = tr.grader.grade([tr.decode(c) for c in conts], [r for r in rows for _ in range(k)])
    return sum(verdicts) / len(verdicts)


def main() -> None:
    from scout import config, grid, tuning
    from scout.embedded import sampling
    from scout.embedded.trainer import Trainer
    from scout.paths import Paths
    from scout.prepare import load_rows
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configfile", default=str(REPO / "config" / "config.yaml"))
    p.add_argument("--setting", default="toy-l-s-math")
    p.add_argument("--variant", default="scout")
    p.add_argument("--prefixes", default="tm-hard,tm-long", help="benchmarks whose prompts give held-out prefixes")
    p.add_argument("--own", default="tm-easy,tm-hard,tm-long", help="benchmarks for the teacher's own accuracy")
    p.add_argument("--ratios", default="0.1,0.3,0.5,0.7,0.9")
    p.add_argument("--student-lr", type=float, help="instead of the setting's (or its tuning stage's choice)")
    p.add_argument("--teacher-lr", type=float, help="instead of the setting's (or its tuning stage's choice)")
    args = p.parse_args()
    torch.set_num_threads(1)
    cfg = tuning.resolve(config.load(args.configfile))  # a tuned setting: the choices in results/tuning
    for param in ("student_lr", "teacher_lr"):
        if getattr(args, param) is not None:
            cfg["settings"][args.setting][param] = getattr(args, param)
        if tuning.lr(cfg, args.setting, param) == tuning.TUNED:
            raise SystemExit(f"{args.setting}: {param} is tuned and not chosen yet (no "
                             f"{tuning.choice_path(cfg, args.setting, param)}): run the grid's tuning stage, or "
                             f"give --{param.replace('_', '-')}")  # fmt: skip
    spec = (g := grid.Grid.of(cfg)).spec(g.find(args.setting, args.variant, 1))
    sc = spec["method_cfg"]["scout"]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        tr = Trainer(spec, tmp, device="cpu")
        held = [r for b in args.prefixes.split(",") for r in load_rows(Paths.of(cfg).data(b))]
        own_rows = [r for b in args.own.split(",") for r in load_rows(Paths.of(cfg).data(b))]
        ratios = [float(r) for r in args.ratios.split(",")]
        g = torch.Generator().manual_seed(12345)
        held_prompts = [tr.prompt_ids(r) for r in held for _ in range(2)]
        held_rows = [r for r in held for _ in range(2)]
        held_resp = sampling.sample(tr.models.student, held_prompts, tr.sampling(), tr.eos, tr.pad, g)
        evaluation = {k: cfg["evaluation"][k] for k in ("temperature", "top_p", "max_new_tokens")}
        before = continuation_accuracy(tr, tr.models.teacher, held_rows, held_resp, ratios, 4, evaluation, 1)
        own_before = own_accuracy(tr, tr.models.teacher, own_rows, 8, evaluation, 2)

        per_ratio: dict[float, list[dict]] = defaultdict(list)
        updates = [s for s in range(spec["total_steps"]) if (s + 1) % sc["interval"] == 0]
        for step in updates:
            rows = tr.batch_rows(step)
            prompts = [tr.prompt_ids(r) for r in rows]
            responses, _ = tr._rollout(step, prompts)  # the initial student: it is never updated here
            m = tr.teacher_step(step, rows, prompts, responses)
            per_ratio[round(m["teacher_prefix_ratio"], 2)].append(m)
        after = continuation_accuracy(tr, tr.models.teacher, held_rows, held_resp, ratios, 4, evaluation, 1)
        own_after = own_accuracy(tr, tr.models.teacher, own_rows, 8, evaluation, 2)
        tr.grader.close()

    print(f"teacher phase of {args.setting}/{args.variant}: {len(updates)} updates (f = {sc['interval']} of "
          f"{spec['total_steps']} steps), K = {sc['k']}, teacher LR {sc['teacher_lr']:g} (student {spec['lr']:g}), "
          f"{len(tr.batch_rows(0))} prefixes an update, split over the {sc.get('split', 'response')}")  # fmt: skip
    print("  update ratio  informative groups  reward  prefixes holding the answer")
    for ratio, ms in sorted(per_ratio.items()):
        inf = statistics.mean(m["teacher_informative"] for m in ms)
        rew = statistics.mean(m["teacher_reward"] for m in ms)
        com = statistics.mean(m["teacher_committed"] for m in ms)
        print(f"  {ratio:12.2f}  {inf:18.0%}  {rew:6.0%}  {com:27.0%}")
    print(f"  informative groups, all updates: {statistics.mean(m['teacher_informative'] for ms in per_ratio.values() for m in ms):.0%};"
          f" lowest at any ratio: {min(statistics.mean(m['teacher_informative'] for m in ms) for ms in per_ratio.values()):.0%}")  # fmt: skip
    print(
        f"held-out fixed prefixes of the initial student ({args.prefixes}: {len(held_resp)} responses, 4 continuations "
        "each, evaluation sampling):"
    )
    print("  ratio  before  after  change  prefixes holding the answer  late self-checks before -> after")
    for r in ratios:
        print(
            f"  {r:5.1f}  {before[r][0]:6.1%}  {after[r][0]:5.1%}  {100 * (after[r][0] - before[r][0]):+6.1f}"
            f"  {before[r][1]:27.0%}  {before[r][2]:6.1%} -> {after[r][2]:.1%}"
        )
    mean_b = statistics.mean(before[r][0] for r in ratios)
    mean_a = statistics.mean(after[r][0] for r in ratios)
    print(f"  mean   {mean_b:6.1%}  {mean_a:5.1%}  {100 * (mean_a - mean_b):+6.1f}")
    print(
        f"own accuracy ({args.own}: {len(own_rows)} prompts x 8 samples, evaluation sampling): {own_before:.1%} -> {own_after:.1%} "
        f"({100 * (own_after - own_before):+.1f} points)"
    )
    print(f"pilot took {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
