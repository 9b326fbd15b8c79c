#!/usr/bin/env python3
"""Prints one traced assert as text: a developer service (`formattest-dev serve --dev-simulator`)
with `--otlp-endpoint` to otlp_receiver.py, one key registered, one form asserted under a
caller's traceparent, and the spans the receiver got drawn as a tree with their durations, then
the request's JSON log line.

usage: .venv-otlp/bin/python e2e/observability/trace_tree.py FORMATTEST-DEV
"""
import datetime
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

here = os.path.dirname(os.path.abspath(__file__))
binary = sys.argv[1]
work = tempfile.mkdtemp()
spans_path = os.path.join(work, "spans.jsonl")

receiver = subprocess.Popen([sys.executable, os.path.join(here, "otlp_receiver.py"), spans_path],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
receiver_port = int(receiver.stdout.readline())
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
log_path = os.path.join(work, "server.log")
server = subprocess.Popen(
    [binary, "serve", "--dev-simulator", "--port", str(port), "--store", f"sqlite:{work}/store.sqlite", "--data-dir", f"{work}/data",
     "--otlp-endpoint", f"http://127.0.0.1:{receiver_port}", "--evidence-in-answer", "--log-format", "json", "--log-level", "info"],
    stdout=subprocess.DEVNULL, stderr=open(log_path, "w"))
for _ in range(300):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        break
    except OSError:
        time.sleep(0.1)


def post(path, body, headers=None):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read()), dict(answer.headers)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), dict(error.headers)


def form(amount):
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return {"action": "transfer", "amount": amount, "to": "bob", "username": "alice", "timestamp": stamp, "nonce": str(uuid.uuid4())}


first = form("1.00")
_, simulated, _ = post("/api/dev/simulate", {"action": "attest", "form": first})
key = simulated["keyId"]
status, answer, _ = post("/api/appattest/attest", {"username": "alice", "keyId": key, "attestationObject": simulated["attestationObject"], "form": first})
assert status == 200, answer
signed = form("2.00")
_, simulated, _ = post("/api/dev/simulate", {"action": "assert", "keyId": key, "form": signed})
trace_id, caller_span = secrets.token_hex(16), secrets.token_hex(8)
status, answer, headers = post("/api/appattest/assert", {"username": "alice", "keyId": key, "assertion": simulated["assertion"], "form": signed},
                               {"traceparent": f"00-{trace_id}-{caller_span}-01"})
print(f"POST /api/appattest/assert -> {status}; traceparent 00-{trace_id}-{caller_span}-01; traceresponse {headers.get('traceresponse')}")
server.send_signal(signal.SIGTERM)
server.wait(timeout=30)
spans = []
for _ in range(100):
    if os.path.exists(spans_path):
        spans = [json.loads(line) for line in open(spans_path)]
        if any(s["traceId"] == trace_id and s["kind"] == "SPAN_KIND_SERVER" for s in spans):
            break
    time.sleep(0.2)
receiver.stdin.close()
receiver.wait()
trace = sorted((s for s in spans if s["traceId"] == trace_id), key=lambda s: s["start"])
children = {}
for span in trace:
    children.setdefault(span["parentSpanId"], []).append(span)


def draw(span, depth):
    duration = (span["end"] - span["start"]) / 1e6
    offset = (span["start"] - trace[0]["start"]) / 1e6
    attributes = " ".join(f"{k}={v}" for k, v in sorted(span["attributes"].items()))
    print(f"{'  ' * depth}{span['name']:<{44 - 2 * depth}} +{offset:7.3f} ms {duration:8.3f} ms  {attributes}")
    for child in children.get(span["spanId"], []):
        draw(child, depth + 1)


print(f"trace {trace_id} (caller span {caller_span}):")
for root in children.get(caller_span, []):
    draw(root, 0)
for line in open(log_path):
    entry = json.loads(line)
    if entry.get("message") == "request" and entry.get("traceId") == trace_id:
        print("log:", line.strip())
