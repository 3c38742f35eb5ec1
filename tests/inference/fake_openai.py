"""A small in-process OpenAI-compatible server (`/v1/completions`) for the openai backend's fast tests.

Behaviour is scripted by the prompt's first word, so one batch can mix cases:
- `fail-<status>-<n> ...`: the first n attempts at this prompt answer HTTP <status> (body echoes the prompt, as a
  careless server might: the client must never show it);
- `drop-<n> ...`: the first n attempts close the connection without an answer;
- `sleep-<ms>-<n> ...`: the first n attempts wait <ms> before answering (client timeouts);
- `lead ...`: the completion opens with a newline (a server-side "\\n" stop ends it empty);
- anything else: the completion is " ECHO(<prompt>)\\nsecond line".
Stop strings cut the completion at their first occurrence (as servers do) and set `stop_reason`. Log-probabilities
(`logprobs`) are a deterministic distribution over `vocab` tokens derived from the prompt's token ids, keyed
"token_id:<id>" when `return_tokens_as_token_ids`; `capped=True` answers like a server without that (top 5 by text),
`refuse_logprobs=True` refuses full rows with HTTP 400 (vLLM's default `--max-logprobs 20`).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter, defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

VOCAB = 49152


def fake_logprobs(prompt_ids: list[int]) -> np.ndarray:
    """The fake model's next-token log-probabilities after `prompt_ids` (float64, full vocabulary)."""
    rng = np.random.default_rng([len(prompt_ids), *prompt_ids[-8:]])
    logits = rng.normal(0.0, 3.0, VOCAB)
    return logits - np.logaddexp.reduce(logits)


def completion_text(prompt: str) -> str:
    word = prompt.split(" ", 1)[0]
    if word == "lead":
        return f"\nbody of {prompt}\nmore"
    return f" ECHO({prompt})\nsecond line"


class FakeServer:
    def __init__(self, *, capped: bool = False, refuse_logprobs: bool = False, jitter: float = 0.0) -> None:
        self.capped = capped
        self.refuse_logprobs = refuse_logprobs
        self.jitter = jitter
        self.lock = threading.Lock()
        self.attempts: Counter[str] = Counter()
        self.arrivals: dict[str, list[float]] = defaultdict(list)
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    server.handle(self, body)
                finally:
                    with server.lock:
                        server.in_flight -= 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> FakeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _reply(self, handler, status: int, payload: dict, headers: dict | None = None) -> None:
        data = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            handler.send_header(key, value)
        handler.end_headers()
        handler.wfile.write(data)

    def handle(self, handler, body: dict) -> None:
        prompt = body["prompt"]
        key = prompt if isinstance(prompt, str) else json.dumps(prompt)
        with self.lock:
            self.attempts[key] += 1
            attempt = self.attempts[key]
            self.arrivals[key].append(time.monotonic())
            self.bodies.append(body)
            self.headers.append({k.lower(): v for k, v in handler.headers.items()})  # names are case-blind
        if self.jitter:
            time.sleep(random.uniform(0, self.jitter))
        word = key.split(" ", 1)[0]
        parts = word.split("-")
        if parts[0] == "fail" and attempt <= int(parts[2]):
            status = int(parts[1])
            extra = {"Retry-After": "0"} if status == 429 else {}
            return self._reply(handler, status, {"error": {"message": f"bad prompt: {key}"}}, extra)
        if parts[0] == "drop" and attempt <= int(parts[1]):
            handler.close_connection = True
            handler.connection.shutdown(2)  # no status line at all: a broken connection for the client
            return None
        if parts[0] == "sleep" and attempt <= int(parts[2]):
            time.sleep(int(parts[1]) / 1000)
        if self.refuse_logprobs and body.get("logprobs") == -1:
            return self._reply(handler, 400, {"error": {"message": "logprobs -1 > max_logprobs 20"}})
        if isinstance(prompt, list):
            return self._reply(handler, 200, self._logprob_choice(prompt, body))
        text, stop_reason = completion_text(prompt), None
        for stop in body.get("stop") or []:
            if stop in text and (stop_reason is None or text.index(stop) < text.index(stop_reason)):
                stop_reason = stop
        if stop_reason is not None:
            text = text[: text.index(stop_reason)]
        choice = {"index": 0, "text": text, "finish_reason": "stop" if stop_reason else "length",
                  "stop_reason": stop_reason}
        return self._reply(handler, 200, {"object": "text_completion", "choices": [choice]})

    def _logprob_choice(self, prompt_ids: list[int], body: dict) -> dict:
        row = fake_logprobs(prompt_ids)
        if self.capped:  # like a server with top-5 log-probabilities keyed by text
            top = {f"tok{i}": float(row[i]) for i in np.argsort(row)[::-1][:5]}
        else:
            ids = body.get("logprob_token_ids") or (range(VOCAB) if body.get("logprobs") == -1 else [])
            top = {f"token_id:{i}": float(row[i]) for i in ids}
            chosen = int(row.argmax())
            top[f"token_id:{chosen}"] = float(row[chosen])  # the sampled token always comes back
        choice = {"index": 0, "text": "x", "finish_reason": "length",
                  "logprobs": {"tokens": ["x"], "token_logprobs": [0.0], "top_logprobs": [top]}}
        return {"object": "text_completion", "choices": [choice]}
