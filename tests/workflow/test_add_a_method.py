"""docs/extending.md's "Add a method", followed literally on a copy of the repository: each of its code
blocks is pasted where the guide says, the hand-worked test passes, the config validates, and a
cell of the new method trains and differs from plain OPD."""

from __future__ import annotations

import json

import torch
from safetensors.torch import load_file

from tests.support import guide

SPECS = """
import json, sys, yaml
from scout import grid
from scout.grid import Grid
cfg = yaml.safe_load(open("config/config.yaml"))
cfg["training"].update(steps=3, batch_size=4, max_response_length=16)
cfg["settings"]["toy-l-s-math"].update(student_lr=1.5e-4, teacher_lr=1.5e-4)  # numbers, not the tuning stage's
paths = json.loads(sys.argv[1])
grid = Grid.of(cfg)
for v in ("opd", "opd_clip"):
    spec = grid.spec(grid.find("toy-l-s-math", v, 1))
    json.dump({**spec, **paths}, open(f"{v}.json", "w"))
"""


def test_the_readme_steps_add_a_method_that_trains(tmp_path, world):
    copy = guide.repo_copy(tmp_path / "repo")
    steps = guide.steps("method", "Add a method", "Add a benchmark")
    assert [s["file"] for s in steps] == [
        "scout/methods.py",
        "scout/algorithms.py",
        "tests/train/test_algorithms.py",
        "config/config.yaml",
        "workflow/schemas/config.schema.yaml",
    ]
    for step in steps:
        guide.apply(copy, step)

    assert guide.run(copy, "-c", "import scout; print(scout.__file__)").stdout.startswith(str(copy))
    worked = guide.run(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/train/test_algorithms.py", "-k", "clip_advantage")
    assert "1 passed" in worked.stdout
    assert "valid (toy world)" in guide.run(copy, "-m", "scout.cli", "check-config", "config/config.yaml").stdout
    guide.run(copy, "-m", "scout.schema")  # the key reference, with the new keys and their help
    assert "`methods.opd_clip.bound`" in (copy / "docs" / "config-keys.md").read_text()
    declared = guide.run(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/config/test_settings_declared.py")
    assert " passed" in declared.stdout and "skipped" not in declared.stdout  # all of them ran, and passed
    claim = "import yaml; from scout import claims; from scout.grid import Grid; print([c['id'] for c in claims.specs(Grid.of(yaml.safe_load(open('config/config.yaml'))))])"
    assert "'clip_beats_opd'" in guide.run(copy, "-c", claim).stdout  # the claims page tests it

    paths = {"student": world["student"], "teacher": world["teacher"],
             "train_data": str(world["data"] / "math-train.jsonl")}  # fmt: skip
    guide.run(copy, "-c", SPECS, json.dumps(paths))
    spec = json.loads((copy / "opd_clip.json").read_text())
    assert spec["method_cfg"] == {"opd_clip": {"bound": 1.0}}
    # the untrained mini models disagree by far less than 1 nat a token: a bound that binds there
    spec["method_cfg"]["opd_clip"]["bound"] = 0.01
    (copy / "opd_clip.json").write_text(json.dumps(spec))
    weights = {}
    for v in ("opd", "opd_clip"):
        guide.run(copy, "-m", "scout.cli", "train", "--spec", f"@{v}.json", "--out", f"runs/{v}")
        assert json.loads((copy / "runs" / v / "train.json").read_text())["steps"] == 3
        weights[v] = load_file(str(copy / "runs" / v / "model" / "final" / "model.safetensors"))
    # the same seed and data: only the clipped advantage tells the two runs apart
    assert any(not torch.equal(weights["opd"][k], weights["opd_clip"][k]) for k in weights["opd"])
