"""The paper's configuration tables, from the config alone: the hyperparameters of each method, the
learning rates (tuned ones as the tuning stage chose them) and the benchmarks."""

from __future__ import annotations

from scout import entries, schema, tuning
from scout.grid import Grid
from scout.methods import METHODS
from scout.render import lr_entry

DOMAIN_TITLES = {"math": "Mathematical Reasoning", "code": "Code Generation"}


def spans(labels: list[str]) -> list[dict]:
    """Column-group headers: each run of equal labels as one span (columns from 2, after the row names)."""
    out: list[dict] = []
    for lab in labels:
        if out and out[-1]["label"] == lab:
            out[-1]["n"] += 1
        else:
            out.append({"label": lab, "n": 1})
    start = 2
    for sp in out:
        sp["start"], sp["end"] = start, start + sp["n"] - 1
        start += sp["n"]
    return out


def _joined(values: list) -> str:
    uniq = list(dict.fromkeys(values))
    return " / ".join(str(v) for v in uniq)


def _scout_k_and_f(grid: Grid) -> tuple[str, str]:
    """K and f of the grid's SCOUT runs, as their specs hold them (a setting or a variant may
    override either): one value, or each value with the variants (and settings) that run it."""
    first = {}  # the cells of a variant in a setting differ by seed alone: one spec each
    for c in grid.cells:
        if METHODS[c.method].teacher_phase == "scout":
            first.setdefault((c.variant, c.setting), c)
    specs = {key: grid.method_settings(c)["scout"] for key, c in first.items()}
    if not specs:
        specs = {("", ""): entries.method_settings({"scout": grid.config["methods"]["scout"]})["scout"]}
    out = []
    for key in ("k", "interval"):
        by_value: dict = {}
        for (variant, setting), sc in specs.items():
            by_value.setdefault(getattr(sc, key), []).append((variant, setting))
        if len(by_value) == 1:
            out.append(str(next(iter(by_value))))
            continue
        split = {v for v, _ in specs if len({getattr(specs[k], key) for k in specs if k[0] == v}) > 1}
        parts = []
        for value, where in by_value.items():
            names = dict.fromkeys(f"{v}, {st}" if v in split else v for v, st in where)
            parts.append(f"{value} ({'; '.join(names)})")
        out.append(", ".join(parts))
    return out[0], out[1]


def hyper_table(grid: Grid) -> dict:
    config = grid.config
    tr, ev = config["training"], config["evaluation"]
    domains = list(dict.fromkeys(s["domain"] for s in config["settings"].values()))
    panels = []
    for d in domains:
        ss = [s for s in config["settings"].values() if s["domain"] == d]
        rows = [
            ("Max Prompt Length", _joined([s.get("max_prompt_length", tr["max_prompt_length"]) for s in ss])),
            ("Max Response Length", tr["max_response_length"]),
            ("Training Rollout Temperature", tr["temperature"]),
            ("Training Rollout Top-p", tr["top_p"]),
            ("Rollout Number per Prompt (n)", schema.setting(config, "training.n")),
            ("Global Batch Size", tr["batch_size"]),
            ("PPO Mini-Batch Size", tr.get("mini_batch_size", tr["batch_size"])),
            ("PPO Epochs", schema.setting(config, "training.ppo_epochs")),
            ("PPO Clipping Range", tr["clip"]),
            ("Learning-Rate Schedule", schema.setting(config, "training.lr_schedule")),
            ("Training Epochs", _joined([s.get("epochs", schema.default("settings.*.epochs")) for s in ss])),
        ]
        if "steps" in tr:
            rows.append(("Steps per Epoch", tr["steps"]))
        rows += [
            None,
            ("Inference Temperature", ev["temperature"]),
            ("Inference Top-p", ev["top_p"]),
            ("Inference Max Response Length", ev["max_new_tokens"]),
        ]
        panels.append({"title": f"{d.capitalize()}", "rows": rows})
    g = tr["grpo"]
    k, f = _scout_k_and_f(grid)
    return {
        "name": "hyperparameters",
        "template": "hyper",
        "label": "tab:hyper",
        "caption": f"Training and inference hyperparameters per task (from the config). GRPO: n = {g['n']}, learning "
        f"rate {g['lr']:g}, β = {g['kl_beta']}; SCOUT's teacher: GRPO with K = {k} continuations per prefix "
        f"every f = {f} steps.",
        "panels": panels,
    }


def lr_table(grid: Grid) -> dict:
    config = grid.config

    def entry(setting: str, param: str):
        tuned = config["settings"][setting][param] == tuning.TUNED
        return lr_entry(tuning.lr(config, setting, param), note="tuned" if tuned else "")

    rows = [
        {
            "teacher": s["teacher"],
            "student": s["student"],
            "task": s["domain"].capitalize(),
            "student_lr": entry(name, "student_lr"),
            "teacher_lr": entry(name, "teacher_lr"),
        }
        for name, s in config["settings"].items()
    ]
    caption = "Learning rates of the student and (for SCOUT) the teacher per setting."
    if tuning.tuned_settings(config):
        caption += (" Those marked tuned were chosen by the tuning stage on the validation set: the student LR on "
                    "OPD, then the teacher LR on SCOUT at that student LR (the sensitivity figure).")  # fmt: skip
    return {"name": "learning_rates", "template": "lr", "label": "tab:learning-rates", "caption": caption, "rows": rows}


def benchmark_table(grid: Grid) -> dict:
    benches = grid.benchmarks
    domains = list(dict.fromkeys(b.domain for b in benches.values()))
    cols = [(d, b) for d in domains for b in grid.benchmarks_for(d)]
    return {
        "name": "benchmarks",
        "template": "benchmarks",
        "label": "tab:benchmarks",
        "caption": "Evaluation benchmarks: number of questions and of sampled responses per question (avg@k).",
        "col_groups": spans([DOMAIN_TITLES.get(d, d) for d, _ in cols]),
        "labels": [benches[b].heading for _, b in cols],
        "questions": [benches[b].rows for _, b in cols],
        "repeats": [benches[b].repeats for _, b in cols],
    }
