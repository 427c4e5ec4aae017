"""The README is a front door into the docs: short, every link into the docs resolves (the file and
its heading), and the everyday commands it gives for a finished grid run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.toy import REPO

PAGES = [REPO / "README.md", REPO / "config" / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    heads = re.findall(r"^#+ (.*)$", page.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    broken = []
    for link in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if link.startswith(("http://", "https://", "mailto:")):
            continue
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            broken.append(f"{link}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{link}: no such heading")
    assert not broken, broken


def test_the_readme_is_a_front_door():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    first_screen = "\n".join(text.splitlines()[:50])
    assert "make demo" in first_screen and "make test" in first_screen


def test_the_everyday_commands_that_need_no_results_run_as_written(tmp_path):
    """`scout status`, `plan` and `check-config` from the README's everyday block, in a fresh
    folder (status) or the checkout (the configs); the report and fingerprints need a finished
    grid (tests/workflow/test_workflow.py renders the report, the Makefile's `make toy` runs fingerprints)."""
    text = (REPO / "README.md").read_text()
    block = text[text.index("The everyday commands") :].split("```bash\n", 1)[1].split("```", 1)[0]
    lines = [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]
    assert [line.split()[:2] for line in lines] == [
        ["scout", "status"], ["scout", "plan"], ["scout", "check-config"], ["snakemake", "--cores"], ["scout", "fingerprints"]
    ]  # fmt: skip
    for line in lines[:3]:
        words = line.split()[1:]
        where = {"cwd": REPO}
        if words[0] == "status":
            words += ["--configfile", str(REPO / "config" / "config.yaml"), "--directory", str(tmp_path)]
        out = subprocess.run([sys.executable, "-m", "scout.cli", *words], capture_output=True, text=True, **where)
        assert out.returncode == 0, (line, out.stderr[-2000:])
        assert out.stdout.strip(), line


def test_the_guides_comparison_has_the_seeds_the_allocation_study_gives_the_headline():
    """One answer on seeds: the recipe for a comparison of one's own (docs/extending.md) runs as
    many paired seeds as the toy config gives the headline's SCOUT and OPD, which the allocation
    study chose, and it links that study."""
    import yaml

    text = (REPO / "docs" / "extending.md").read_text()
    block = re.search(r"<!-- add-a-method: config/config.yaml, merged -->\n```yaml\n(.*?)```", text, re.S)[1]
    (recipe,) = yaml.safe_load(block)["experiments"].values()
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    arms = {m["name"]: m["seeds"] for m in config["experiments"]["headline"]["methods"] if isinstance(m, dict)}
    assert len(recipe["seeds"]) == len(arms["opd"]) == len(arms["scout"]) == 6
    assert "toy-world.md#seeds-for-the-headline-claims-the-allocation-study" in text


def test_the_keys_a_variant_may_set_are_the_schemas():
    import yaml

    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    (entry,) = [b for b in schema["$defs"]["method_entry"]["oneOf"] if b.get("type") == "object"]
    text = (REPO / "config" / "README.md").read_text()
    table = text[text.index("**A variant of a method.**") :].split("\n\n")[1]
    listed = set(re.findall(r"^\| `([a-z_]+)`(?:, `([a-z_]+)`)?", table, re.M))
    listed = {k for pair in listed for k in pair if k}
    assert listed == set(entry["properties"]) - {"name", "method"}
