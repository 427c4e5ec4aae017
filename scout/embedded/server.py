"""An OpenAI-compatible scoring server on the embedded engine: the part of vLLM's server a teacher
server's users read (``/v1/models``, ``/v1/completions`` with ``prompt_logprobs``, and the request
counter on ``/metrics``), for the toy world on a machine without vLLM, where it starts in seconds.

Its answers are vLLM's layout: per sequence, ``None`` for the first position, then for each later
position ``{token id: {"logprob", "rank"}}`` holding the token there (its rank among the vocabulary)
and the ``k`` most likely tokens (ranks 1..k), raw log-probs of the model in float32.

    python -m scout.embedded.server --model DIR --served-model-name NAME --port N [--max-logprobs K]
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

from scout.embedded import lm


def prompt_logprobs(model: torch.nn.Module, seqs: list[list[int]], k: int) -> list[list[dict | None]]:
    """vLLM's ``prompt_logprobs`` of each whole sequence (its first position None)."""
    out = []
    with torch.no_grad():
        for seq in seqs:
            ids = torch.tensor([seq], dtype=torch.long)
            logp = torch.log_softmax(lm.score(model, ids, torch.ones_like(ids))[0, :-1], dim=-1)
            taken = logp.gather(1, ids[0, 1:, None])[:, 0]
            ranks = (logp > taken[:, None]).sum(dim=1) + 1
            top = logp.topk(k, dim=-1) if k else None
            rows: list[dict | None] = [None]
            for i, token in enumerate(seq[1:]):
                row = {str(token): {"logprob": float(taken[i]), "rank": int(ranks[i])}}
                if top is not None:
                    for r, (t, v) in enumerate(zip(top.indices[i].tolist(), top.values[i].tolist(), strict=True), 1):
                        row.setdefault(str(t), {"logprob": float(v), "rank": r})
                rows.append(row)
            out.append(rows)
    return out


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, model: torch.nn.Module, name: str, max_logprobs: int):
        super().__init__(address, Handler)
        self.model, self.name, self.max_logprobs = model, name, max_logprobs
        self.answered = 0
        self.lock = threading.Lock()  # one forward at a time: the engine is not thread-safe


class Handler(BaseHTTPRequestHandler):
    server: Server

    def log_message(self, *args) -> None:  # quiet: the workflow keeps its own log
        pass

    def _send(self, code: int, body: dict | str) -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": self.server.name, "object": "model"}]})
        elif self.path == "/metrics":
            self._send(200, f"vllm:request_success_total{{model_name=\"{self.server.name}\"}} {self.server.answered}\n")
        else:
            self._send(404, {"error": f"no route {self.path}"})

    def do_POST(self) -> None:
        if self.path != "/v1/completions":
            self._send(404, {"error": f"no route {self.path}"})
            return
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        k = int(body.get("prompt_logprobs") or 0)
        if body.get("model") != self.server.name:
            self._send(404, {"error": f"the model {body.get('model')!r} does not exist"})
            return
        if k > self.server.max_logprobs:
            self._send(400, {"error": f"prompt_logprobs {k} is above --max-logprobs {self.server.max_logprobs}"})
            return
        prompts = body["prompt"]
        seqs = [prompts] if prompts and isinstance(prompts[0], int) else prompts
        with self.server.lock:
            scored = prompt_logprobs(self.server.model, seqs, k)
            self.server.answered += len(seqs)
        self._send(200, {"object": "text_completion", "model": self.server.name,
                         "choices": [{"index": i, "text": "", "prompt_logprobs": rows} for i, rows in enumerate(scored)]})  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--served-model-name", required=True)
    ap.add_argument("--host", default="0.0.0.0")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--max-logprobs", type=int, default=20)
    args, _ = ap.parse_known_args(argv)  # vLLM's other flags (--max-model-len, ...) do not apply
    torch.set_num_threads(1)
    model = lm.load_model(args.model, torch.device("cpu")).eval()
    server = Server((args.host, args.port), model, args.served_model_name, args.max_logprobs)
    print(f"serving {args.served_model_name} on port {args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
