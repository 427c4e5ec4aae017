"""The install's uv takes its packages from where pip is pointed (constraints/uv_pip.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path

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
    """A wheel in a folder that only pip's configuration names: uv, told not to use any index,
    resolves it through the find-links the helper handed over."""
    _wheel(tmp_path, "scout_uv_probe", "1.0")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    ask = [sys.executable, str(ROOT / "constraints" / "uv_pip.py"), "install", "--dry-run", "--no-index"]

    def uv(**pip_env) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*ask, "scout_uv_probe==1.0"], env=env | pip_env, capture_output=True, text=True, timeout=120
        )

    got = uv(PIP_FIND_LINKS=str(tmp_path))
    assert got.returncode == 0 and "scout-uv-probe==1.0" in got.stderr, got.stderr
    # and without it, the same request finds nothing: the folder came from pip's settings
    alone = uv(PIP_CONFIG_FILE=os.devnull)
    assert alone.returncode != 0 and "scout-uv-probe" in alone.stderr, alone.stderr
