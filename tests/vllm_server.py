"""vLLM's OpenAI-compatible server on CPU for the tests: a toy model (head_dim 32, which vLLM's CPU
attention supports) on a free local port, as a user would start a teacher server."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def openai_server(model: str | Path, log: Path, name: str, max_logprobs: int = 20) -> Iterator[str]:
    """The server's URL while it runs; its output goes to ``log`` (quoted when it fails to start)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
           "--served-model-name", name, "--dtype", "float32", "--max-model-len", "256",
           "--gpu-memory-utilization", "0.1", "--port", str(port), "--max-logprobs", str(max_logprobs),
           "--enforce-eager"]  # fmt: skip
    out = open(log, "w")  # noqa: SIM115 - open for the server's lifetime
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"})
    url, t0 = f"http://127.0.0.1:{port}", time.monotonic()
    try:
        while True:
            try:
                urllib.request.urlopen(f"{url}/v1/models", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() - t0 > 240:
                    raise RuntimeError(f"vLLM's server did not start: {log.read_text()[-3000:]}") from None
                time.sleep(1)
        print(f"\nvLLM CPU server up in {time.monotonic() - t0:.1f}s", flush=True)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        out.close()
