"""What the Python system checks under e2e/ share: the pass/fail tally they all print, the HTTP
helpers, waiting for a service, stopping it, a free port, a fresh transfer form.

Each script puts this directory on sys.path and imports from it; standard library only, so every
venv (.venv-interop, .venv-browser) can use it.
"""

import base64
import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid


class Checks:
    """The tally every check script keeps: call it with (name, condition, detail), then `finish()`
    prints each failure, `N passed, M failed` last, and exits non-zero on any failure."""

    def __init__(self):
        self.passed = 0
        self.failures = []

    def __call__(self, name, condition, detail=""):
        if condition:
            self.passed += 1
        else:
            self.failures.append(f"{name} {detail}")

    def succeed(self):
        self.passed += 1

    def fail(self, message):
        self.failures.append(message)

    def finish(self):
        for failure in self.failures:
            print("FAILED:", failure)
        print(f"{self.passed} passed, {len(self.failures)} failed")
        sys.exit(1 if self.failures else 0)


def post_json(base, path, body, timeout=30):
    """(status, decoded JSON answer) of a JSON POST; an HTTP error status is an answer, not an exception."""
    request = urllib.request.Request(
        base + path, data=json.dumps(body).encode(), headers={"content-type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def get(base, path, timeout=30):
    with urllib.request.urlopen(base + path, timeout=timeout) as response:
        return response.read()


def transfer_form(amount="1.00"):
    """A fresh transfer, stamped with the real clock (the service checks its time window)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"
    return {"action": "transfer", "amount": amount, "to": "bob", "username": "alice", "timestamp": stamp, "nonce": str(uuid.uuid4())}


def b64url_decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def write_text(directory, name, text):
    """Writes `text` to directory/name and returns the path."""
    path = os.path.join(directory, name)
    with open(path, "w") as handle:
        handle.write(text)
    return path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(base, seconds=30, statuses=(200, 503)):
    """Whether GET base/healthz answered with one of `statuses` within `seconds`; `base` is a URL
    or a port on 127.0.0.1."""
    if isinstance(base, int):
        base = f"http://127.0.0.1:{base}"
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=2) as response:
                if response.status in statuses:
                    return True
        except urllib.error.HTTPError as error:
            if error.code in statuses:
                return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def stop_process(process, seconds=20):
    """SIGTERM, then SIGKILL if it is still running after `seconds` (mongoeco can be slow to stop
    under load)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
