"""One evidence log for many instances (issue 34), checked by code the project's Swift does not
share: two `formattest-dev serve --dev-simulator` instances on one MongoDB, each with a directory
of its own for its copy of the log, append to one log. The script checks, with RFC 9162's
verification algorithms and the signed-note format transcribed in evidence_log_end_to_end.py:

- forms accepted concurrently by both instances get one sequence of log indexes (no gap, no
  index twice), and both instances sign checkpoints of the same trees (same size, same root);
- every record is included in the tree of either instance's checkpoint;
- after a kill -9 of one instance in the middle of the load, every record answered by either is
  in the log at its index, the other goes on appending, and the restarted one's next checkpoint
  extends the last one published (a consistency proof);
- each instance's directory is a complete copy (`formattest evidence audit` over it, with the
  key registrations the other instance stored, fetched from the store);
- a directory that is not a copy of the shared log, or an instance with another checkpoint key, is
  refused at start; a log that ran alone moves into an empty shared log, in order, and a new
  instance copies it.

Usage: evidence_log_shared.py FORMATTEST_DEV_BINARY FORMATTEST_BINARY WORK_DIR MONGODB_URI
Prints `N passed, M failed` last and exits non-zero on any failure.
"""

import base64
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from evidence_log_end_to_end import checkpoint, get_json, leaf_hash, verify_consistency, verify_inclusion  # noqa: E402
from formattest_support import Checks, b64url_decode, free_port, post_json as post, stop_process, transfer_form, wait_ready, write_text  # noqa: E402


class Instance:
    """One service instance: its port, its log directory, its process."""

    def __init__(self, name, dev_binary, work, uri, database, key_path, log_dir=None, store=None):
        self.name = name
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_dir = log_dir or os.path.join(work, "log-" + name)
        self.arguments = [
            dev_binary, "serve", "--dev-simulator", "--port", str(self.port), "--log-level", "warning",
            "--store", store or uri, "--data-dir", os.path.join(work, "data-" + name),
            "--evidence-log", self.log_dir, "--evidence-log-key", key_path, "--evidence-in-answer",
            "--rate-limit-assertions-per-user", "10000", "--rate-limit-per-address", "100000",
        ]
        if store is None:
            self.arguments += ["--mongodb-database", database]
        self.process = None

    def start(self):
        self.process = subprocess.Popen(self.arguments, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        return wait_ready(self.base, seconds=60)

    def refused_start(self):
        result = subprocess.run(self.arguments, capture_output=True, timeout=120)
        return result.returncode, result.stderr.decode(errors="replace")

    def kill(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self):
        stop_process(self.process)


class Device:
    """A user with one simulated key on one instance, signing forms one after another."""

    def __init__(self, instance, username):
        self.instance = instance
        self.username = username
        self.key = None

    def accept(self, amount):
        """(logIndex, payload) of an accepted form, or None when the instance did not answer."""
        base = self.instance.base
        body = transfer_form(amount)
        body["username"] = self.username
        try:
            if self.key is None:
                status, simulated = post(base, "/api/dev/simulate", {"action": "attest", "form": body})
                if status != 200:
                    return ("simulate", status, simulated)
                key = simulated["keyId"]
                status, answer = post(base, "/api/appattest/attest", {
                    "username": self.username, "keyId": key, "attestationObject": simulated["attestationObject"], "form": body})
                if status == 200:
                    self.key = key
            else:
                status, simulated = post(base, "/api/dev/simulate", {"action": "assert", "keyId": self.key, "form": body})
                if status != 200:
                    return ("simulate", status, simulated)
                status, answer = post(base, "/api/appattest/assert", {
                    "username": self.username, "keyId": self.key, "assertion": simulated["assertion"], "form": body})
        except OSError:
            return None
        if status != 200 or not isinstance(answer.get("evidenceLogIndex"), int):
            return ("refused", status, answer)
        return (answer["evidenceLogIndex"], b64url_decode(answer["evidence"]["payload"]))


def run_devices(devices, count, results, errors, stop_on_failure=False):
    """Each device signs `count` forms in a thread of its own; answered records go to `results`."""
    lock = threading.Lock()

    def work(device):
        for n in range(count):
            outcome = device.accept(f"{n}.{len(device.username):02d}")
            with lock:
                if outcome is None or isinstance(outcome[0], str):
                    errors.append((device.username, outcome))
                    if stop_on_failure:
                        return
                else:
                    results.append(outcome)

    threads = [threading.Thread(target=work, args=(device,)) for device in devices]
    for thread in threads:
        thread.start()
    return threads


def proof_hashes(answer):
    return [base64.b64decode(h, validate=True) for h in answer.get("hashes", [])]


def all_included(check, instance, records, tree):
    bad = []
    for index, payload in records:
        status, answer = get_json(instance.base, f"/api/evidence/proof/inclusion?index={index}&size={tree['size']}")
        if status != 200 or not verify_inclusion(index, tree["size"], leaf_hash(payload), proof_hashes(answer), tree["root"]):
            bad.append((index, status, answer))
    check(f"every answered record ({len(records)}) is in {instance.name}'s tree of {tree['size']} (RFC 9162 §2.1.3.2)", not bad, bad[:3])


def main():
    dev_binary, binary, work, uri = sys.argv[1:5]
    database = "sharedlog_" + uuid.uuid4().hex[:8]
    check = Checks()
    key_path = os.path.join(work, "log.key")
    result = subprocess.run([binary, "evidence", "log-key", "--name", "bank.example/evidence", "--out", key_path], capture_output=True, timeout=60)
    check("evidence log-key", result.returncode == 0, result.stderr)
    verifier_key = result.stdout.decode().strip()

    a = Instance("a", dev_binary, work, uri, database, key_path)
    b = Instance("b", dev_binary, work, uri, database, key_path)
    check("instance a starts on MongoDB with its own log directory", a.start())
    check("instance b starts on the same MongoDB with its own log directory", b.start())

    # Both instances at once: two devices on each, 12 forms each.
    records, errors = [], []
    devices = [Device(a, "alice"), Device(a, "carol"), Device(b, "bob"), Device(b, "dave")]
    for thread in run_devices(devices, 12, records, errors):
        thread.join()
    check("48 forms accepted by the two instances, each with a log index", len(records) == 48 and not errors, errors[:3])
    indexes = sorted(index for index, _ in records)
    check("one sequence of indexes across both instances: 0..47, none twice", indexes == list(range(48)), indexes)

    # An instance reads the store for a checkpoint at most every 100 ms (a flood of requests must not
    # become a flood of reads): a checkpoint may miss the other instance's last 100 ms.
    time.sleep(0.2)
    first_a, first_b = checkpoint(a.base, verifier_key), checkpoint(b.base, verifier_key)
    check("both instances sign a checkpoint of the whole log: 48 leaves, one root",
          first_a["size"] == first_b["size"] == 48 and first_a["root"] == first_b["root"], (first_a, first_b))
    all_included(check, a, records, first_a)
    all_included(check, b, records, first_b)

    # kill -9 of instance a in the middle of the load; b goes on.
    during, during_errors = [], []
    threads = run_devices(devices, 20, during, during_errors, stop_on_failure=True)
    deadline = time.monotonic() + 60
    while len(during) < 12 and time.monotonic() < deadline:
        time.sleep(0.05)
    a.kill()
    for thread in threads:
        thread.join()
    lost = [e for e in during_errors if e[0] in ("bob", "dave")]
    check("instance b answered all its forms while a was killed", not lost, lost[:3])
    check("some forms were answered before the kill, and a's devices then saw it gone",
          len(during) >= 12 and any(e[0] in ("alice", "carol") for e in during_errors), (len(during), during_errors[:2]))
    time.sleep(0.2)
    after_kill = checkpoint(b.base, verifier_key)
    answered = records + during
    indexes = [index for index, _ in answered]
    check("no index answered twice", len(indexes) == len(set(indexes)), sorted(indexes))
    check("every answered index is in b's tree", all(index < after_kill["size"] for index in indexes), (after_kill["size"], max(indexes)))
    all_included(check, b, answered, after_kill)
    status, answer = get_json(b.base, f"/api/evidence/proof/consistency?first=48&second={after_kill['size']}")
    check("b's checkpoint after the kill extends the first one (RFC 9162 §2.1.4.2)",
          status == 200 and verify_consistency(48, after_kill["size"], first_a["root"], after_kill["root"], proof_hashes(answer)), answer)

    # a restarts on its directory: it copies what it missed and extends the last checkpoint.
    check("instance a restarts after kill -9", a.start())
    time.sleep(0.2)
    restarted = checkpoint(a.base, verifier_key)
    check("a's first checkpoint after the restart is b's tree (same size, same root)",
          restarted["size"] == after_kill["size"] and restarted["root"] == after_kill["root"], (restarted, after_kill))
    all_included(check, a, answered, restarted)

    # Both go on: a's simulated devices lost their keys with the process; new users attest.
    more, more_errors = [], []
    devices = [Device(a, "erin"), Device(b, "bob2")]
    for thread in run_devices(devices, 6, more, more_errors):
        thread.join()
    check("12 more forms accepted after the restart", len(more) == 12 and not more_errors, more_errors[:3])
    answered += more
    time.sleep(0.2)
    final_a, final_b = checkpoint(a.base, verifier_key), checkpoint(b.base, verifier_key)
    indexes = sorted(index for index, _ in answered)
    check("the log has no gap: every leaf below the size is a record, the answered ones at their indexes",
          final_a["size"] == final_b["size"] == after_kill["size"] + 12 and indexes[-1] < final_a["size"]
          and len(indexes) == len(set(indexes)), (final_a["size"], final_b["size"], indexes[-5:]))
    check("the two instances' final checkpoints are one tree", final_a["root"] == final_b["root"])
    status, answer = get_json(a.base, f"/api/evidence/proof/consistency?first={after_kill['size']}&second={final_a['size']}")
    check("a's final checkpoint extends the one b published after the kill",
          status == 200 and verify_consistency(after_kill["size"], final_a["size"], after_kill["root"], final_a["root"], proof_hashes(answer)), answer)
    all_included(check, b, answered, final_b)
    a.stop()
    b.stop()

    # Each directory is a complete copy: audited leaf by leaf, with every key registration (b's
    # copy holds a's keys' registrations, fetched from the store, and the other way round).
    def write(name, text):
        return write_text(work, name, text)

    old_note, new_note = write("first.checkpoint", first_a["note"]), write("final.checkpoint", final_a["note"])
    for instance in (a, b):
        audit = subprocess.run([binary, "evidence", "audit", "--log", instance.log_dir, "--log-key", verifier_key,
                                "--old", old_note, "--new", new_note], capture_output=True, timeout=300)
        output = audit.stdout.decode() + audit.stderr.decode()
        check(f"evidence audit of {instance.name}'s copy: exit 0, {final_a['size']} leaves",
              audit.returncode == 0 and f"audited {final_a['size']} leaves" in output, output[-600:])

    # An instance with another checkpoint key (or pointed at another deployment's database) is
    # refused: the log's status names the key every instance signs with.
    other_key = os.path.join(work, "other.key")
    result = subprocess.run([binary, "evidence", "log-key", "--name", "bank.example/evidence", "--out", other_key], capture_output=True, timeout=60)
    status, message = Instance("otherkey", dev_binary, work, uri, database, other_key).refused_start()
    check("an instance with another log key is refused at start, named", status != 0 and "signed with another key" in message,
          (status, message[-400:]))

    # A log that ran alone (SQLite store) is not a copy of the shared one: refused at start.
    alone = Instance("alone", dev_binary, work, uri, database, key_path, store="sqlite:" + os.path.join(work, "alone.sqlite"))
    check("a single instance with a log of its own starts", alone.start())
    solo = Device(alone, "frank")
    solo_records = [solo.accept(f"{n}.00") for n in range(3)]
    check("it accepts 3 forms at 0, 1, 2", [r[0] if r else None for r in solo_records] == [0, 1, 2], solo_records)
    alone_checkpoint = checkpoint(alone.base, verifier_key)
    alone.stop()
    joining = Instance("joining", dev_binary, work, uri, database, key_path, log_dir=alone.log_dir)
    status, message = joining.refused_start()
    check("its directory on the shared log's database: refused at start, named", status != 0 and "not a copy of the shared log" in message,
          (status, message[-400:]))

    # The same log moves into an empty shared log, in order, and a new instance copies it.
    fresh = "sharedlog_" + uuid.uuid4().hex[:8]
    moving = Instance("moving", dev_binary, work, uri, fresh, key_path, log_dir=alone.log_dir)
    check("on an empty shared log the log moves in: the instance starts", moving.start())
    copier = Instance("copier", dev_binary, work, uri, fresh, key_path)
    check("a new instance with an empty directory starts on it", copier.start())
    time.sleep(0.2)
    moved, copied = checkpoint(moving.base, verifier_key), checkpoint(copier.base, verifier_key)
    check("both sign the log that ran alone: 3 leaves, its root", moved["size"] == copied["size"] == 3
          and moved["root"] == copied["root"] == alone_checkpoint["root"], (moved, copied, alone_checkpoint))
    all_included(check, copier, solo_records, copied)
    more_solo = Device(copier, "grace").accept("9.00")
    check("the next form, on the copier, gets index 3", more_solo is not None and more_solo[0] == 3, more_solo)
    last = checkpoint(copier.base, verifier_key)
    moving.stop()
    copier.stop()
    moved_note, after_note = write("moved.checkpoint", moved["note"]), write("copier.checkpoint", last["note"])
    audit = subprocess.run([binary, "evidence", "audit", "--log", copier.log_dir, "--log-key", verifier_key, "--old", moved_note,
                            "--new", after_note], capture_output=True, timeout=300)
    output = audit.stdout.decode() + audit.stderr.decode()
    check("evidence audit of the copier's directory (the moved log's registrations fetched from the store): exit 0",
          audit.returncode == 0 and "audited 4 leaves" in output, output[-600:])
    check.finish()


if __name__ == "__main__":
    main()
