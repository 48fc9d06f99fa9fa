#!/usr/bin/env python3
"""A webhook endpoint for the relay's tests: records every request, checks
each signature with the `standardwebhooks` package (PyPI, the reference
implementation of Standard Webhooks, independent of the crate), and answers
what the test scripted.

    python3 tests/webhook_endpoint.py SECRET_FILE

prints `port N` once it listens on 127.0.0.1 (a free port), then serves:

- `PUT /_answers` with `{"path": "/hook", "answers": [{"status": 503,
  "headers": {"Retry-After": "1"}, "delay": 0.0}, ...], "default": {...}}`:
  the answers `path` gives, in order, then its default (200 at once);
- `GET /_requests`: `{"requests": [...], "in_flight": n, "max_in_flight":
  n, "overlapping": [ids]}`, every request answered so far, in order, with
  whether its signature verified, how many are being answered now, and the
  ids that arrived while a request with the same id was still being
  answered;
- any other `POST`: recorded and answered.
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook

SECRET = open(sys.argv[1]).read().strip()
WEBHOOK = Webhook(SECRET)
LOCK = threading.Lock()
REQUESTS = []
ANSWERS = {}
DEFAULTS = {}
IN_FLIGHT = {}
STATE = {"in_flight": 0, "max_in_flight": 0, "overlapping": []}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body=b"", headers=None):
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def body(self):
        return self.rfile.read(int(self.headers.get("Content-Length", "0")))

    def do_GET(self):
        if self.path != "/_requests":
            return self.reply(404)
        with LOCK:
            out = dict(STATE, requests=REQUESTS)
            payload = json.dumps(out).encode()
        self.reply(200, payload, {"Content-Type": "application/json"})

    def do_PUT(self):
        if self.path != "/_answers":
            return self.reply(404)
        script = json.loads(self.body())
        with LOCK:
            ANSWERS[script["path"]] = list(script.get("answers", []))
            DEFAULTS[script["path"]] = script.get("default", {"status": 200})
        self.reply(204)

    def do_POST(self):
        start = time.time()
        body = self.body()
        headers = {k.lower(): v for k, v in self.headers.items()}
        wid = headers.get("webhook-id")
        try:
            WEBHOOK.verify(body, headers, json_parse=False)
            verified, error = True, None
        except Exception as e:  # what the package says is the verdict
            verified, error = False, repr(e)
        with LOCK:
            if IN_FLIGHT.get(wid, 0) > 0:
                STATE["overlapping"].append(wid)
            IN_FLIGHT[wid] = IN_FLIGHT.get(wid, 0) + 1
            STATE["in_flight"] += 1
            STATE["max_in_flight"] = max(STATE["max_in_flight"], STATE["in_flight"])
            queue = ANSWERS.get(self.path, [])
            answer = queue.pop(0) if queue else DEFAULTS.get(self.path, {"status": 200})
        time.sleep(answer.get("delay", 0))
        with LOCK:
            IN_FLIGHT[wid] -= 1
            STATE["in_flight"] -= 1
            REQUESTS.append(
                {
                    "path": self.path,
                    "method": self.command,
                    "id": wid,
                    "timestamp": headers.get("webhook-timestamp"),
                    "signature": headers.get("webhook-signature"),
                    "idempotency_key": headers.get("idempotency-key"),
                    "traceparent": headers.get("traceparent"),
                    "content_type": headers.get("content-type"),
                    "verified": verified,
                    "verify_error": error,
                    "body_hex": body.hex(),
                    "start": start,
                    "end": time.time(),
                    "status": answer["status"],
                }
            )
        try:
            self.reply(answer["status"], b"", answer.get("headers"))
        except (BrokenPipeError, ConnectionResetError):
            pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(f"port {server.server_address[1]}", flush=True)
server.serve_forever()
