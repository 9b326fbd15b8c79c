#!/usr/bin/env python3
"""Fault injection under load (run by the Swift test suite).

usage: fault_test.py --binary FORMATTEST --mongoeco-python PYTHON --work DIR

1. SQLite, restart mid-load: the service is killed (SIGKILL) while two clients submit signed
   forms, then restarted on the same file; the clients go on. Afterwards every form that was
   answered 200 is sent again and must be answered 409 (replay): nothing accepted was lost, and
   nothing is accepted twice (each form ends accepted exactly once).
2. MongoDB down mid-load: the MongoDB server (mongoeco, persisting to SQLite) is killed while the
   clients submit; the service must answer 503 while it is down and succeed again without a
   restart; no form is accepted twice; a form answered 503 may afterwards be refused as a replay
   (MongoDB died between the commit's parts: fail closed, documented in docs/deployment.md); every
   200 is replayed at the end and must be 409.
Prints "N passed, M failed".
"""
import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/healthz")
            if connection.getresponse().status in (200, 503):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def post(port, body):
    """One request on a fresh connection: (status or None when the connection failed)."""
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("POST", "/api/appattest/assert", json.dumps(body), {"content-type": "application/json"})
        response = connection.getresponse()
        response.read()
        return response.status
    except (OSError, http.client.HTTPException):
        return None


def client(port_ref, bodies, results, stop):
    """Sends its bodies in order; a body that got no HTTP answer or a 503 is retried later."""
    index = 0
    while index < len(bodies) and not stop.is_set():
        status = post(port_ref[0], bodies[index])
        results.append((index, status))
        if status in (None, 503):
            time.sleep(0.05)
            continue  # the same form again: it was not accepted
        index += 1


def stop_process(process, seconds=20):
    """SIGTERM, then SIGKILL if it is still running (mongoeco can be slow to stop under load)."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def load_bodies(path):
    per_connection = {}
    for line in open(path):
        entry = json.loads(line)
        per_connection.setdefault(entry["connection"], []).append(entry["body"])
    return [per_connection[k] for k in sorted(per_connection)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mongoeco-python", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    passed, failures = 0, []

    def check(name, condition, detail=""):
        nonlocal passed
        if condition:
            passed += 1
        else:
            failures.append(f"{name} {detail}")

    root = os.path.join(args.work, "root.pem")
    with open(root, "w") as out:
        subprocess.run([args.binary, "simulate", "root"], stdout=out, check=True)

    def serve(port, store, extra=()):
        return subprocess.Popen(
            [args.binary, "serve", "--port", str(port), "--store", store, *extra, "--root", root,
             "--data-dir", os.path.join(args.work, "data"), "--log-level", "error", "--form-max-age", "3600"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def outcomes(results_per_client):
        """Per form: 'accepted' (a 200, or a 409 on the retry of a request whose answer the kill
        cut off: it had been committed), 'refused-after-outage' (a 409 after only 503 answers:
        MongoDB died between a commit's parts and left the replay record; never accepted, the
        client must sign a fresh form), or 'double' / 'refused' (both failures)."""
        finals = {}
        for client_index, results in enumerate(results_per_client):
            interrupted, unavailable = set(), set()
            for index, status in results:
                key = (client_index, index)
                if status is None:
                    interrupted.add(index)
                elif status == 503:
                    unavailable.add(index)
                elif status == 200 or (status == 409 and index in interrupted):
                    finals[key] = "double" if key in finals else "accepted"
                elif status == 409 and index in unavailable:
                    finals[key] = "refused-after-outage"
                else:
                    finals[key] = "refused"
        return Counter(finals.values())

    def replay_all(port, bodies_per_client, results_per_client):
        accepted = [bodies[i] for bodies, results in zip(bodies_per_client, results_per_client) for i, s in results if s == 200]
        statuses = Counter(post(port, body) for body in accepted)
        return len(accepted), statuses

    # 1. SQLite: kill -9 mid-load, restart.
    store = "sqlite:" + os.path.join(args.work, "restart.sqlite")
    bodies = os.path.join(args.work, "restart.jsonl")
    subprocess.run([args.binary, "simulate", "prepare-load", "--store", store, "--keys", "2", "--per-key", "400", "--out", bodies], check=True)
    per_client = load_bodies(bodies)
    port = [free_port()]
    server = serve(port[0], store)
    check("sqlite: service starts", wait_ready(port[0]))
    results, stop = [[] for _ in per_client], threading.Event()
    threads = [threading.Thread(target=client, args=(port, b, r, stop)) for b, r in zip(per_client, results)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    server.send_signal(signal.SIGKILL)
    server.wait()
    time.sleep(0.5)
    server = serve(port[0], store)
    check("sqlite: service restarts", wait_ready(port[0]))
    for thread in threads:
        thread.join(timeout=120)
    stop.set()
    statuses = Counter(s for r in results for _, s in r)
    check("sqlite: the kill interrupted requests", statuses.get(None, 0) > 0, str(statuses))
    check("sqlite: no other status than 200, 503 or a retry's 409", all(s in (None, 200, 409, 503) for s in statuses), str(statuses))
    sqlite_outcomes = outcomes(results)
    check("sqlite: every form accepted exactly once (one transaction per commit)", sqlite_outcomes == Counter({"accepted": 800}), str(sqlite_outcomes))
    count, replayed = replay_all(port[0], per_client, results)
    check("sqlite: after the restart, every accepted form is a replay (none lost)", replayed == Counter({409: count}), f"{count} {replayed}")
    stop_process(server)
    print(f"sqlite restart: {dict(statuses)}; forms: {dict(sqlite_outcomes)}; {count} accepted forms replayed: {dict(replayed)}")

    # 2. MongoDB (mongoeco persisting to SQLite) killed mid-load and brought back.
    mongo_port = free_port()
    mongo_file = os.path.join(args.work, "mongo.sqlite")

    def mongo():
        process = subprocess.Popen(
            [args.mongoeco_python, os.path.join(repo, "scripts/mongoeco_server.py"), "--port", str(mongo_port), "--sqlite", mongo_file],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = process.stdout.readline()
        return process, line.split(" ", 1)[1].strip()

    mongod, uri = mongo()
    bodies = os.path.join(args.work, "mongo.jsonl")
    subprocess.run([args.binary, "simulate", "prepare-load", "--store", uri, "--mongodb-database", "faults", "--keys", "2", "--per-key", "150", "--out", bodies], check=True)
    per_client = load_bodies(bodies)
    port = [free_port()]
    server = serve(port[0], uri, ("--mongodb-database", "faults"))
    check("mongodb: service starts", wait_ready(port[0]))
    results, stop = [[] for _ in per_client], threading.Event()
    threads = [threading.Thread(target=client, args=(port, b, r, stop)) for b, r in zip(per_client, results)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    mongod.send_signal(signal.SIGKILL)
    mongod.wait()
    time.sleep(4)
    mongod, _ = mongo()
    for thread in threads:
        thread.join(timeout=180)
    stop.set()
    statuses = Counter(s for r in results for _, s in r)
    check("mongodb: requests failed closed with 503 while it was down", statuses.get(503, 0) > 0, str(statuses))
    check("mongodb: no other status than 200, 503 or a retry's 409", all(s in (None, 200, 409, 503) for s in statuses), str(statuses))
    mongo_outcomes = outcomes(results)
    check("mongodb: the service recovered without a restart", server.poll() is None and mongo_outcomes["accepted"] > 0)
    check("mongodb: no form accepted twice, none refused but after an outage", set(mongo_outcomes) <= {"accepted", "refused-after-outage"} and sum(mongo_outcomes.values()) == 300, str(mongo_outcomes))
    count, replayed = replay_all(port[0], per_client, results)
    check("mongodb: every accepted form is a replay afterwards (none lost)", replayed == Counter({409: count}), f"{count} {replayed}")
    print(f"mongodb outage: {dict(statuses)}; forms: {dict(mongo_outcomes)}; {count} accepted forms replayed: {dict(replayed)}")
    stop_process(server)
    stop_process(mongod)

    for failure in failures:
        print("FAILED:", failure)
    print(f"{passed} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
