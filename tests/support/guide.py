"""docs/extending.md's guides, followed literally on a copy of the repository: each step is a
marker (``<!-- add-a-<kind>: <file>, <where> -->``) over a fenced code block, pasted where it says.
The tests of the three guides (a method, a part of a new kind, a backend) share this reader, so a
guide's wording and the way it is followed are defined once."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from scout.config import deep_merge
from tests.support.toy import REPO

GUIDE = REPO / "docs" / "extending.md"
# what a copy leaves out: environments, results and caches (a guide's steps never touch them)
NOT_COPIED = (".venv", ".git", "results", ".snakemake", "__pycache__", ".*_cache")


def repo_copy(dest: Path, *also_without: str) -> Path:
    """A copy of the repository's sources at ``dest``, without ``NOT_COPIED`` and ``also_without``."""
    shutil.copytree(REPO, dest, ignore=shutil.ignore_patterns(*NOT_COPIED, *also_without))
    return dest


def steps(kind: str, section: str, next_section: str) -> list[re.Match]:
    """The ``add-a-<kind>`` steps of the guide's ``## <section>``, in order."""
    marker = re.compile(rf"<!-- add-a-{kind}: (?P<file>\S+), (?P<where>[^>]+?) -->\n```\w+\n(?P<code>.*?)```", re.S)
    text = GUIDE.read_text()
    return list(marker.finditer(text[text.index(f"## {section}") : text.index(f"## {next_section}")]))


def _at_anchor(text: str, file: str, anchor: str, code: str, replace: bool) -> str:
    """``code`` replacing, or after, the one line of the file that starts with ``anchor``."""
    lines = text.splitlines(keepends=True)
    at = [i for i, line in enumerate(lines) if line.startswith(anchor)]
    assert len(at) == 1, f"docs/extending.md: {file} has {len(at)} lines starting {anchor!r}, not one"
    i = at[0]
    lines[i : i + 1] = [code] if replace else [lines[i], code]
    return "".join(lines)


def apply(copy: Path, step: re.Match) -> None:
    """Paste one step's code into the copy where the step says."""
    path, where, code = copy / step["file"], step["where"], step["code"]
    anchored = re.fullmatch(r"(after|replacing) `(.+)`", where)
    if where == "a new file":
        assert not path.exists(), f"{step['file']} exists already"
        path.write_text(code)
        return
    text = path.read_text()
    if anchored:
        text = _at_anchor(text, step["file"], anchored[2], code, anchored[1] == "replacing")
    elif where == "at the end":
        text = text.rstrip("\n") + "\n\n\n" + code
    elif where == "into the METHODS list":  # before the list's closing bracket
        at = text.rindex("    ]\n}")
        text = text[:at] + code + text[at:]
    elif where == "into BACKENDS":  # before the dict's closing brace
        at = text.index("\n}", text.index("BACKENDS = {"))
        text = text[:at] + "\n" + code.rstrip("\n") + text[at:]
    elif where == "merged":
        text = yaml.safe_dump(deep_merge(yaml.safe_load(text), yaml.safe_load(code)), sort_keys=False)
    else:
        raise AssertionError(f"docs/extending.md: a step says {where!r}, which the tests do not know how to follow")
    path.write_text(text)


def run(copy: Path, *cmd: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``python *cmd`` against the copy's package (and this environment's tools on the PATH)."""
    env = {**os.environ, "PYTHONPATH": str(copy), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("SCOUT_WORKFLOW", None)
    done = subprocess.run([sys.executable, *cmd], cwd=cwd or copy, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(cmd)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done
