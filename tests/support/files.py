"""Files written by hand."""

from __future__ import annotations

import json


def safetensors(path, n: int = 4) -> None:
    """A whole safetensors file of one float32 tensor, written by hand (header size, header, data)."""
    header = json.dumps({"w": {"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]}}).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(4 * n))
