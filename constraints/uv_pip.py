"""`uv pip`, pointed where pip is pointed: `python constraints/uv_pip.py install ...`.

The install takes every package from the lock with uv (the CPU install with vLLM's CPU build in
59-95 s on 2 cores, where pip takes 119 s: uv unpacks and compiles in parallel). uv does not read
pip's configuration, and on many machines torch's CPU build is found only through it (a
find-links folder, an extra index): this hands pip's index settings to uv, then runs uv. Only the
standard library: it runs before the project is installed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

# pip's setting -> uv's environment variable, and how uv separates a list
UV_ENV = {
    "index-url": ("UV_INDEX_URL", None),
    "extra-index-url": ("UV_EXTRA_INDEX_URL", " "),
    "find-links": ("UV_FIND_LINKS", ","),
    "trusted-host": ("UV_INSECURE_HOST", " "),
    "cert": ("SSL_CERT_FILE", None),
}
TRUE = {"1", "true", "yes", "on"}  # pip's spellings of a switch that is on
# later wins, as in pip: the [global] section, then [install], then PIP_* variables
SECTIONS = ("global", "install", ":env:")
LINE = re.compile(r"^(?P<section>[^.]+)\.(?P<key>[a-z-]+)='(?P<value>.*)'$")


def pip_settings(listing: str) -> dict[str, str]:
    """pip's effective index settings from `pip config list`'s output."""
    found: dict[str, tuple[int, str]] = {}
    for line in listing.splitlines():
        m = LINE.match(line.strip())
        if not m or m["key"] not in (*UV_ENV, "no-index") or m["section"] not in SECTIONS:
            continue
        rank = SECTIONS.index(m["section"])
        if m["key"] not in found or rank >= found[m["key"]][0]:
            found[m["key"]] = (rank, m["value"])
    return {k: v for k, (_, v) in found.items()}


def uv_environment(settings: dict[str, str]) -> dict[str, str]:
    """uv's variables for pip's settings. Every index is trusted alike, as pip trusts them: a
    package is taken from whichever index has the locked version (uv's default stops at the
    first index that knows the package's name)."""
    env = {"UV_INDEX_STRATEGY": "unsafe-best-match"}
    for key, value in settings.items():
        if key in UV_ENV:  # no-index is a flag (uv_flags)
            name, sep = UV_ENV[key]
            env[name] = sep.join(value.split()) if sep else value
    return env


def uv_flags(settings: dict[str, str], command: str) -> list[str]:
    """pip's ``no-index`` (a cluster with only wheel folders), which uv takes only as an install flag."""
    no_index = settings.get("no-index", "").strip().lower() in TRUE
    return ["--no-index"] if no_index and command == "install" else []


def main(argv: list[str]) -> int:
    uv = shutil.which("uv", path=os.path.dirname(sys.executable)) or shutil.which("uv")
    if uv is None:
        sys.exit(f"uv is not installed beside {sys.executable} (pip install uv)")
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    settings = pip_settings(listing)
    flags = uv_flags(settings, argv[0] if argv else "")
    env = os.environ | uv_environment(settings)
    return subprocess.run([uv, "pip", *argv, *flags, "--python", sys.executable], env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
