"""The evidence log end to end, checked by code the project's Swift does not share: a running
`formattest-dev serve --dev-simulator --evidence-log DIR --evidence-log-key KEY` appends a record of
every accepted form to its log, and this script verifies the checkpoints (C2SP signed note, Ed25519
with `cryptography`), the inclusion of every record and the consistency of successive checkpoints
with RFC 9162's own verification algorithms (§2.1.3.2 and §2.1.4.2), transcribed below from the
RFC's pseudo-code and kept apart from the product's implementation. It kills the service with
SIGKILL and checks that the restarted log still holds every answered record at its index and that
its next checkpoint extends the last one published.

With the log on, records are version 2 (issue 34): each references its key's registration
(`keyRegistration`, base64url SHA-256 of the registration document) instead of carrying the key's
attestation, and the document is stored once per key in `DIR/registrations/<2 hex>/<2 hex>/<64
hex>.json`. The script checks the leaves' real sizes (each at most 3 KB), that one file per key is
written, that bundles carry the registration and verify through the CLI, that `evidence verify
--registrations` checks a record against the directory, and that `evidence audit` names a deleted
or altered registration.

Usage: evidence_log_end_to_end.py FORMATTEST_DEV_BINARY FORMATTEST_BINARY WORK_DIR
Prints `N passed, M failed` last and exits non-zero on any failure.
"""

import base64
import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from formattest_support import Checks, b64url_decode, free_port, get, post_json as post, stop_process, transfer_form as form, wait_ready, write_text  # noqa: E402

SCHEMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "schemas", "evidence-record.schema.json")
REGISTRATION_SCHEMA = os.path.join(os.path.dirname(SCHEMA), "key-registration.schema.json")
LEAF_LIMIT = 3 * 1024  # issue 34: a record occupies at most 3 KB beyond its key's one-time registration


# RFC 9162 §2.1.1 and §2.1.3.2 / §2.1.4.2, transcribed.
def leaf_hash(data):
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left, right):
    return hashlib.sha256(b"\x01" + left + right).digest()


def verify_inclusion(leaf_index, tree_size, leaf, path, root):
    if leaf_index >= tree_size:
        return False
    fn, sn, r = leaf_index, tree_size - 1, leaf
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(first, second, first_hash, second_hash, path):
    if first == second:
        return not path and first_hash == second_hash
    if not path or first == 0 or first > second:
        return False
    if first & (first - 1) == 0:
        path = [first_hash] + path
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == first_hash and sr == second_hash


# C2SP signed-note with an Ed25519 key (name+hash+base64(0x01 || key)), transcribed.
def open_note(note, verifier_key):
    name, key_hash, key64 = verifier_key.split("+", 2)
    key = base64.b64decode(key64, validate=True)
    assert key[0] == 1 and len(key) == 33
    assert hashlib.sha256(name.encode() + b"\n" + key).digest()[:4].hex() == key_hash
    text, _, signatures = note.rpartition("\n\n")
    text += "\n"
    public = Ed25519PublicKey.from_public_bytes(key[1:])
    for line in signatures.splitlines():
        dash, signer, blob64 = line.split(" ")
        blob = base64.b64decode(blob64, validate=True)
        if dash == "\u2014" and signer == name and blob[:4].hex() == key_hash:
            public.verify(blob[4:], text.encode())  # raises InvalidSignature
            return text
    raise InvalidSignature("no signature by " + name)


def checkpoint(base, verifier_key):
    with urllib.request.urlopen(base + "/api/evidence/checkpoint", timeout=30) as response:
        content_type = response.headers.get("content-type", "")
        note = response.read().decode()
    origin, size, root64 = open_note(note, verifier_key).splitlines()[:3]
    return {"origin": origin, "size": int(size), "root": base64.b64decode(root64, validate=True), "type": content_type, "note": note}


def get_json(base, path):
    try:
        with urllib.request.urlopen(base + path, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def canonical(value):
    """RFC 8785 for the bundle's members (strings and integers only)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def bundle_checks(check, binary, dev_binary, work, log_dir, archive_dir, verifier_key, jwks_bytes, records, checkpoint_path):
    """Exports records 3 (with the archive's server-signed envelope) and 0 (the leaf alone), verifies
    both with `evidence verify --log-key`, then changes one thing at a time and expects the named
    refusal."""
    def run(*arguments, program=binary):
        result = subprocess.run([program, *arguments], capture_output=True, timeout=120)
        return result.returncode, result.stdout.decode(errors="replace"), result.stderr.decode(errors="replace")

    def write(name, data):
        path = os.path.join(work, name)
        with open(path, "wb") as handle:
            handle.write(data)
        return path

    jwks = write("bundle-jwks.json", jwks_bytes)
    status, root, _ = run("simulate", "root", program=dev_binary)
    status2, receipt_root, _ = run("simulate", "root", "--receipt", program=dev_binary)
    check("the simulator's roots", status == 0 and status2 == 0)
    roots = ["--root", write("bundle-root.pem", root.encode()), "--receipt-root", write("bundle-receipt-root.pem", receipt_root.encode())]

    def verify(path, key=verifier_key, keyset=jwks):
        status, out, err = run("evidence", "verify", path, "--log-key", key, "--jwks", keyset, *roots, "--json")
        try:
            return status, json.loads(out), err
        except ValueError:
            return status, {}, out + err

    status, out, err = run("evidence", "export", "--log", log_dir, "--log-key", verifier_key, "--index", "3", "--archive", archive_dir,
                           "--out", os.path.join(work, "bundle-3.json"))
    check("export leaf 3 with its envelope: exit 0", status == 0, err)
    with open(os.path.join(work, "bundle-3.json"), "rb") as handle:
        signed_bundle = handle.read()
    document = json.loads(signed_bundle)
    check("the bundle is canonical JSON", canonical(document) == signed_bundle, signed_bundle[:200])
    check("the bundle holds the server's envelope of record 3", b64url_decode(document["envelope"]["payload"]) == records[3][1])
    status, report, err = verify(os.path.join(work, "bundle-3.json"))
    check("verify the bundle of leaf 3: exit 0, in the log, server-signed",
          status == 0 and report.get("verified") is True and report.get("kind") == "assertion"
          and report.get("log") == {"origin": "bank.example/evidence", "index": 3, "checkpointSize": 10, "serverSigned": True}, (status, report, err))

    status, out, err = run("evidence", "export", "--log", log_dir, "--log-key", verifier_key, "--index", "0")
    check("export leaf 0 without an archive (to stdout): exit 0", status == 0, err)
    leaf_bundle = json.loads(out)
    check("... the bundle holds the record itself", b64url_decode(leaf_bundle["record"]) == records[0][1] and "envelope" not in leaf_bundle)
    status, report, err = verify(write("bundle-0.json", out.encode()))
    check("verify the bundle of leaf 0: exit 0, the attestation, no server signature",
          status == 0 and report.get("kind") == "attestation" and report.get("log", {}).get("serverSigned") is False, (status, report, err))

    def refused(name, document, code, key=verifier_key, keyset=jwks):
        status, report, err = verify(write(f"bundle-{name}.json", canonical(document)), key=key, keyset=keyset)
        check(f"{name}: exit 1, {code}", status == 1 and report.get("error", {}).get("code") == code, (status, report, err))

    flipped = bytearray(b64url_decode(leaf_bundle["record"]))
    flipped[len(flipped) // 2] ^= 1
    refused("record-bit-flipped", dict(leaf_bundle, record=b64url(bytes(flipped))), "evidence_not_in_log")
    refused("index-changed", dict(leaf_bundle, index=1), "evidence_not_in_log")
    refused("index-past-the-checkpoint", dict(leaf_bundle, index=10), "evidence_not_in_log")
    proof = [b64url_decode(h) for h in leaf_bundle["inclusionProof"]]
    proof[-1] = bytes([proof[-1][0] ^ 1]) + proof[-1][1:]
    refused("proof-hash-changed", dict(leaf_bundle, inclusionProof=[b64url(h) for h in proof]), "evidence_not_in_log")
    refused("proof-hash-removed", dict(leaf_bundle, inclusionProof=leaf_bundle["inclusionProof"][:-1]), "evidence_not_in_log")
    refused("checkpoint-size-changed", dict(leaf_bundle, checkpoint=leaf_bundle["checkpoint"].replace("\n10\n", "\n11\n", 1)),
            "evidence_checkpoint_invalid")
    other_key = os.path.join(work, "other-log.key")
    status, other_verifier, _ = run("evidence", "log-key", "--name", "bank.example/evidence", "--out", other_key)
    refused("another-log-key", leaf_bundle, "evidence_checkpoint_invalid", key=other_verifier.strip())
    envelope = dict(document["envelope"])
    signature = bytearray(b64url_decode(envelope["signature"]))
    signature[5] ^= 1
    refused("server-signature-changed", dict(document, envelope=dict(envelope, signature=b64url(bytes(signature)))),
            "evidence_server_signature_invalid")
    refused("jwks-without-the-key", document, "evidence_unknown_signer", keyset=write("bundle-empty-jwks.json", b'{"keys":[]}'))
    refused("unknown-member", dict(leaf_bundle, note="x"), "evidence_malformed_bundle")
    refused("record-and-envelope", dict(document, record=leaf_bundle["record"]), "evidence_malformed_bundle")

    status, out, err = run("evidence", "verify", os.path.join(work, "bundle-0.json"), "--jwks", jwks, *roots)
    check("a bundle without --log-key: exit 2, named", status == 2 and "--log-key" in err, (status, out, err))
    status, out, err = run("evidence", "export", "--log", log_dir, "--log-key", verifier_key, "--index", "10")
    check("export of a leaf past the checkpoint: exit 2", status == 2, (status, err))
    status, out, err = run("evidence", "export", "--log", os.path.join(work, "tampered-middle-altered"), "--log-key", verifier_key,
                           "--index", "5", "--checkpoint", checkpoint_path)
    check("export from a log whose leaf 5 was altered: exit 1, not exported", status == 1 and "not exported" in err, (status, err))
    status, out, err = run("evidence", "export", "--log", os.path.join(work, "tampered-rehashed"), "--log-key", verifier_key,
                           "--index", "2", "--checkpoint", checkpoint_path)
    check("export from a log rewritten under its checkpoint: exit 1", status == 1 and "do not hold the tree" in err, (status, err))

    # Version 2: the bundle carries the key's registration, and it is what makes it verify alone.
    registration = b64url_decode(document["registration"]) if "registration" in document else b""
    reference = b64url_decode(json.loads(records[3][1])["keyRegistration"])
    check("the bundle of leaf 3 carries the registration its record references",
          hashlib.sha256(registration).digest() == reference and json.loads(registration)["type"] == "formattest-key-registration",
          document.keys())
    check("... and the leaf-only bundle of leaf 0 too", "registration" in leaf_bundle)
    without = dict(document)
    without.pop("registration", None)
    refused("registration-removed", without, "evidence_registration_missing")
    changed = bytearray(registration)
    changed[len(changed) // 2] ^= 1
    refused("registration-one-byte-changed", dict(document, registration=b64url(bytes(changed))), "evidence_registration_mismatch")
    other_key_registration = registration_files(log_dir, excluding=reference)
    check("the log holds another key's registration to try", len(other_key_registration) == 1, other_key_registration)
    with open(other_key_registration[0], "rb") as handle:
        other_registration = handle.read()
    refused("another-key's-registration", dict(document, registration=b64url(other_registration)), "evidence_registration_mismatch")
    refused("registration-not-base64url", dict(document, registration=document["registration"] + "="), "evidence_malformed_bundle")

    # A version-2 record from the archive: `evidence verify --registrations DIR`, and without it.
    envelope_path = os.path.join(archive_dir, b64url(hashlib.sha256(records[3][1]).digest()) + ".json")
    registrations = os.path.join(log_dir, "registrations")

    def verify_record(*extra):
        status, out, err = run("evidence", "verify", envelope_path, "--jwks", jwks, *roots, "--json", *extra)
        try:
            return status, json.loads(out), err
        except ValueError:
            return status, {}, out + err

    status, report, err = verify_record("--registrations", registrations)
    check("evidence verify of an archived v2 record with --registrations: exit 0",
          status == 0 and report.get("verified") is True and report.get("kind") == "assertion", (status, report, err))
    status, report, err = verify_record()
    check("... without --registrations: exit 2, naming the flag", status == 2 and "--registrations" in err, (status, report, err))
    status, report, err = verify_record("--registrations", os.path.join(work, "no-such-directory"))
    check("... with a directory that does not exist: exit 2", status == 2 and "--registrations" in err, (status, report, err))
    import shutil
    for name, change, code in [
        ("deleted", lambda path: os.remove(path), "evidence_registration_missing"),
        ("altered", lambda path: flip_file(path), "evidence_registration_mismatch"),
        ("another key's", lambda path: shutil.copy(other_key_registration[0], path), "evidence_registration_mismatch"),
    ]:
        copy = os.path.join(work, "registrations-" + name.replace("'", ""))
        shutil.copytree(registrations, copy)
        change(os.path.join(copy, registration_path(reference)))
        status, report, err = verify_record("--registrations", copy)
        check(f"... with its registration {name}: exit 1, {code}", status == 1 and report.get("error", {}).get("code") == code, (status, report, err))
    status, out, err = run("evidence", "verify", os.path.join(work, "bundle-3.json"), "--log-key", verifier_key, "--jwks", jwks, *roots,
                           "--registrations", registrations)
    check("a bundle with --registrations: exit 2 (a bundle carries its registration)", status == 2 and "--registrations" in err, (status, out, err))
    return True


def registration_path(reference):
    hex_name = reference.hex()
    return os.path.join(hex_name[:2], hex_name[2:4], hex_name + ".json")


def registration_files(log_dir, excluding=None):
    found = []
    for directory, _, names in os.walk(os.path.join(log_dir, "registrations")):
        for name in names:
            if excluding is None or name != excluding.hex() + ".json":
                found.append(os.path.join(directory, name))
    return sorted(found)


def flip_file(path):
    with open(path, "rb") as handle:
        data = bytearray(handle.read())
    data[len(data) // 2] ^= 1
    with open(path, "wb") as handle:
        handle.write(bytes(data))


def main():
    dev_binary, binary, work = sys.argv[1:4]
    check = Checks()
    key_path = os.path.join(work, "log.key")
    result = subprocess.run([binary, "evidence", "log-key", "--name", "bank.example/evidence", "--out", key_path], capture_output=True, timeout=60)
    check("evidence log-key", result.returncode == 0, result.stderr)
    verifier_key = result.stdout.decode().strip()
    check("the key file is 0600", stat.S_IMODE(os.stat(key_path).st_mode) == 0o600)
    again = subprocess.run([binary, "evidence", "log-key", "--name", "bank.example/evidence", "--out", key_path], capture_output=True, timeout=60)
    check("an existing key file is never overwritten", again.returncode != 0, again.stdout)

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log_dir = os.path.join(work, "log")
    archive_dir = os.path.join(work, "archive")
    os.mkdir(archive_dir, 0o700)
    arguments = [
        dev_binary, "serve", "--dev-simulator", "--port", str(port), "--log-level", "warning",
        "--store", "sqlite:" + os.path.join(work, "store.sqlite"), "--data-dir", os.path.join(work, "data"),
        "--evidence-log", log_dir, "--evidence-log-key", key_path, "--evidence-in-answer", "--evidence-dir", archive_dir,
        "--rate-limit-assertions-per-user", "1000",
    ]
    server = subprocess.Popen(arguments, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    check("the service starts", wait_ready(base), "no /healthz")

    records = []  # (logIndex, payload bytes)
    state = {}

    # One writer per log: a second instance on the same directory is refused at start.
    second = subprocess.run(
        [arguments[0], "serve", "--dev-simulator", "--port", str(free_port()), "--log-level", "warning",
         "--store", "sqlite:" + os.path.join(work, "second.sqlite"), "--data-dir", os.path.join(work, "data2"),
         "--evidence-log", log_dir, "--evidence-log-key", key_path], capture_output=True, timeout=60)
    check("a second instance on the same log is refused", second.returncode != 0 and b"another process" in second.stderr, second.stderr[-400:])

    def accept(amount, memo=None):
        body = form(amount)
        if memo is not None:
            body["memo"] = memo
        if "key" not in state:
            status, simulated = post(base, "/api/dev/simulate", {"action": "attest", "form": body})
            state["key"] = simulated["keyId"]
            status, answer = post(base, "/api/appattest/attest", {
                "username": "alice", "keyId": state["key"], "attestationObject": simulated["attestationObject"], "form": body})
        else:
            status, simulated = post(base, "/api/dev/simulate", {"action": "assert", "keyId": state["key"], "form": body})
            status, answer = post(base, "/api/appattest/assert", {
                "username": "alice", "keyId": state["key"], "assertion": simulated["assertion"], "form": body})
        check(f"form {amount} accepted with a log index", status == 200 and isinstance(answer.get("evidenceLogIndex"), int), answer)
        records.append((answer.get("evidenceLogIndex"), b64url_decode(answer["evidence"]["payload"])))

    for amount in range(6):
        accept(f"{amount}.00")
    # A form whose record could not be one log entry is refused before anything is stored.
    body = form("7.77")
    body["memo"] = "x" * 30000
    status, simulated = post(base, "/api/dev/simulate", {"action": "assert", "keyId": state["key"], "form": body})
    status, answer = post(base, "/api/appattest/assert", {"username": "alice", "keyId": state["key"], "assertion": simulated["assertion"], "form": body})
    check("a 30 KB form with the log on: 413 form_too_large", status == 413 and answer.get("error", {}).get("code") == "form_too_large", (status, answer))
    import shutil
    shutil.copy(os.path.join(log_dir, "state"), os.path.join(work, "state-at-6"))
    check("log indexes are 0, 1, ... in the order answered", [index for index, _ in records] == list(range(6)), records)

    first = checkpoint(base, verifier_key)
    check("the checkpoint is text/plain", first["type"].startswith("text/plain"), first["type"])
    check("the checkpoint's origin is the key's name", first["origin"] == "bank.example/evidence", first)
    check("the checkpoint covers the six records", first["size"] == 6, first)
    for index, payload in records:
        status, proof = get_json(base, f"/api/evidence/proof/inclusion?index={index}&size={first['size']}")
        path = [base64.b64decode(h, validate=True) for h in proof.get("hashes", [])]
        check(f"record {index} is included (RFC 9162 §2.1.3.2)", status == 200 and verify_inclusion(index, first["size"], leaf_hash(payload), path, first["root"]), proof)
        changed = bytearray(payload)
        changed[len(changed) // 2] ^= 1
        check(f"record {index} with one bit changed is not", not verify_inclusion(index, first["size"], leaf_hash(bytes(changed)), path, first["root"]))
    tampered = first["note"].replace("\n6\n", "\n7\n", 1)
    try:
        open_note(tampered, verifier_key)
        check("a checkpoint with a changed size is refused", False)
    except InvalidSignature:
        check("a checkpoint with a changed size is refused", True)

    for amount in range(6, 9):
        accept(f"{amount}.00")
    second = checkpoint(base, verifier_key)
    status, proof = get_json(base, f"/api/evidence/proof/consistency?first=6&second={second['size']}")
    path = [base64.b64decode(h, validate=True) for h in proof.get("hashes", [])]
    check("the second checkpoint extends the first (RFC 9162 §2.1.4.2)",
          status == 200 and second["size"] == 9 and verify_consistency(6, 9, first["root"], second["root"], path), proof)
    check("... and not a forged first root", not verify_consistency(6, 9, leaf_hash(b"forged"), second["root"], path))

    for query, code in [
        ("proof/inclusion?index=9&size=9", "evidence_log_range"),
        ("proof/inclusion?index=0&size=10", "evidence_log_range"),
        ("proof/consistency?first=9&second=6", "evidence_log_range"),
        ("proof/inclusion?index=01&size=9", "invalid_query"),
        ("proof/inclusion?index=-1&size=9", "invalid_query"),
        ("proof/inclusion?index=1&size=9&size=8", "invalid_query"),
        ("proof/inclusion?size=9", "invalid_query"),
        ("proof/consistency?first=1&second=99999999999999999999", "invalid_query"),
    ]:
        status, answer = get_json(base, "/api/evidence/" + query)
        check(f"{query}: 400 {code}", status == 400 and answer.get("error", {}).get("code") == code, (status, answer))

    time.sleep(1.5)
    with open(os.path.join(log_dir, "checkpoint")) as handle:
        text = open_note(handle.read(), verifier_key)
    check("the checkpoint beside the log covers every record", text.splitlines()[1] == "9", text)

    # kill -9, restart: every answered record at its index, the next checkpoint extends the last.
    server.send_signal(signal.SIGKILL)
    server.wait()
    server = subprocess.Popen(arguments, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    check("the service restarts", wait_ready(base), "no /healthz")
    third = checkpoint(base, verifier_key)
    check("after kill -9 the log has the nine records and the same root", third["size"] == 9 and third["root"] == second["root"], third)
    state.pop("key")  # the simulated device forgets its keys when the service restarts: attest a new one
    accept("9.00")
    check("the next record gets index 9", records[-1][0] == 9, records[-1])

    # Version 2 leaves: the key's attestation is referenced, stored once per key.
    import jsonschema
    with open(SCHEMA) as handle:
        schema = json.load(handle)
    sizes = [len(payload) for _, payload in records]
    print("leaf sizes (bytes):", sizes)
    for index, payload in records:
        record = json.loads(payload)
        try:
            jsonschema.validate(record, schema)
            valid = True
        except jsonschema.ValidationError as error:
            valid = error.message
        check(f"leaf {index} is a version-2 record following the schema, with no keyAttestation",
              record.get("version") == 2 and "keyRegistration" in record and "keyAttestation" not in record and valid is True, valid)
        check(f"leaf {index} is at most {LEAF_LIMIT} bytes ({len(payload)})", len(payload) <= LEAF_LIMIT)
    files = registration_files(log_dir)
    registration_bytes = [os.path.getsize(path) for path in files]
    print("registration files:", len(files), "of", registration_bytes, "bytes")
    references = {json.loads(payload)["keyRegistration"] for _, payload in records}
    check("one registration file per key: two keys (one before the restart, one after), two files",
          len(references) == 2 and len(files) == 2, (references, files))
    with open(REGISTRATION_SCHEMA) as handle:
        registration_schema = json.load(handle)
    for path in files:
        with open(path, "rb") as handle:
            data = handle.read()
        digest = hashlib.sha256(data).digest()
        try:
            jsonschema.validate(json.loads(data), registration_schema)
            valid = True
        except jsonschema.ValidationError as error:
            valid = error.message
        check(f"{os.path.basename(path)} follows schemas/key-registration.schema.json", valid is True, valid)
        check(f"{os.path.relpath(path, log_dir)} is named by its SHA-256, referenced by a record, a registration document, mode 0600",
              os.path.basename(path) == digest.hex() + ".json" and b64url(digest) in references
              and json.loads(data).get("type") == "formattest-key-registration" and canonical(json.loads(data)) == data + b"\n"
              and stat.S_IMODE(os.stat(path).st_mode) == 0o600, path)
        check(f"... its directories are 0700", all(stat.S_IMODE(os.stat(directory).st_mode) == 0o700 for directory in [
            os.path.dirname(path), os.path.dirname(os.path.dirname(path)), os.path.join(log_dir, "registrations")]))
    fourth = checkpoint(base, verifier_key)
    jwks_bytes = get(base, "/.well-known/jwks.json")
    status, proof = get_json(base, "/api/evidence/proof/consistency?first=9&second=10")
    path = [base64.b64decode(h, validate=True) for h in proof.get("hashes", [])]
    check("the checkpoint after the restart extends the one before it", verify_consistency(9, 10, second["root"], fourth["root"], path), proof)
    for index, payload in records:
        status, proof = get_json(base, f"/api/evidence/proof/inclusion?index={index}&size=10")
        path = [base64.b64decode(h, validate=True) for h in proof.get("hashes", [])]
        check(f"record {index} is in the tree of 10", verify_inclusion(index, 10, leaf_hash(payload), path, fourth["root"]), proof)
    stop_process(server)

    # `formattest evidence audit` over the log's files: intact, then each kind of tampering.
    def write(name, text):
        return write_text(work, name, text)

    old_note, new_note = write("old.checkpoint", first["note"]), write("new.checkpoint", fourth["note"])

    def audit(directory):
        result = subprocess.run([binary, "evidence", "audit", "--log", directory, "--log-key", verifier_key, "--old", old_note, "--new", new_note],
                                capture_output=True, timeout=120)
        return result.returncode, result.stdout.decode() + result.stderr.decode()

    status, output = audit(log_dir)
    check("audit of the intact log: exit 0", status == 0 and "audited 10 leaves" in output, output)

    bundle_name, tile_name = "tile/entries/000.partial", "tile/0/000.partial"

    def entries_of(data):
        entries, offset = [], 0
        while offset < len(data):
            length = int.from_bytes(data[offset:offset + 2], "big")
            entries.append(data[offset + 2:offset + 2 + length])
            offset += 2 + length
        return entries

    def bundle_of(entries):
        return b"".join(len(e).to_bytes(2, "big") + e for e in entries)

    def tampered_copy(name, change_entries, fix_tile=False):
        import shutil
        copy = os.path.join(work, "tampered-" + name)
        shutil.copytree(log_dir, copy)
        with open(os.path.join(copy, bundle_name), "rb") as handle:
            entries = entries_of(handle.read())
        entries = change_entries(entries)
        with open(os.path.join(copy, bundle_name), "wb") as handle:
            handle.write(bundle_of(entries))
        if fix_tile:
            with open(os.path.join(copy, tile_name), "wb") as handle:
                handle.write(b"".join(leaf_hash(e) for e in entries))
        return copy

    def flip(index):
        def change(entries):
            entry = bytearray(entries[index])
            entry[len(entry) // 2] ^= 0x01
            entries[index] = bytes(entry)
            return entries
        return change

    def delete(index):
        return lambda entries: entries[:index] + entries[index + 1:]

    def swap(index):
        def change(entries):
            entries[index], entries[index + 1] = entries[index + 1], entries[index]
            return entries
        return change

    for name, change, named in [
        ("first-altered", flip(0), "leaf 0:"), ("middle-altered", flip(5), "leaf 5:"), ("last-altered", flip(9), "leaf 9:"),
        ("first-deleted", delete(0), "leaf 0:"), ("middle-deleted", delete(5), "leaf 5:"), ("last-deleted", delete(9), "leaf 9:"),
        ("first-swapped", swap(0), "leaf 0:"), ("middle-swapped", swap(4), "leaf 4:"), ("last-swapped", swap(8), "leaf 8:"),
    ]:
        status, output = audit(tampered_copy(name, change))
        check(f"audit names {name}: exit 1, {named}", status == 1 and named in output, output)
    def amend(index):
        """A character of the record's assertion changed: still canonical JSON (a version-2 leaf is
        small, and a bit flipped in its middle may break the JSON instead), so that what the audit
        finds is the root."""
        def change(entries):
            entry = entries[index]
            position = entry.index(b'"assertion":"') + len(b'"assertion":"') + 10
            entries[index] = entry[:position] + (b"B" if entry[position:position + 1] != b"B" else b"C") + entry[position + 1:]
            return entries
        return change

    status, output = audit(tampered_copy("rehashed", amend(5), fix_tile=True))
    check("a record altered with its leaf hash rewritten: exit 1, the root does not match", status == 1 and "rewritten" in output, output)

    # A registration deleted or altered: every leaf that references it cannot be verified.
    first_reference = b64url_decode(json.loads(records[0][1])["keyRegistration"])
    for name, change, named in [
        ("registration-deleted", os.remove, "missing"),
        ("registration-altered", flip_file, "does not hash"),
    ]:
        copy = tampered_copy(name, lambda entries: entries)
        change(os.path.join(copy, "registrations", registration_path(first_reference)))
        status, output = audit(copy)
        check(f"audit names a {name}: exit 1, leaf 0, its file", status == 1 and "leaf 0:" in output and named in output
              and registration_path(first_reference) in output, output)
    status, out, err = (lambda r: (r.returncode, r.stdout.decode(), r.stderr.decode()))(subprocess.run(
        [binary, "evidence", "export", "--log", os.path.join(work, "tampered-registration-deleted"), "--log-key", verifier_key, "--index", "2",
         "--checkpoint", new_note], capture_output=True, timeout=120))
    check("export of a leaf whose registration was deleted: exit 1, named", status == 1 and "registration" in err, (status, err))

    # `evidence export`: one record as a bundle that `evidence verify --log-key` checks alone.
    exported = bundle_checks(check, binary, dev_binary, work, log_dir, archive_dir, verifier_key, jwks_bytes, records, new_note)
    check("bundles: exported and checked", exported)

    # The service never forks its own log: a rolled-back or missing state is refused at start,
    # before anything is cut.
    def start_refused(name):
        result = subprocess.run(arguments, capture_output=True, timeout=60)
        check(f"{name}: the service refuses to start", result.returncode != 0, result.stderr[-400:])
        return result.stderr.decode(errors="replace")

    bundle_path = os.path.join(log_dir, bundle_name)
    bundle_size = os.path.getsize(bundle_path)
    shutil.copy(os.path.join(log_dir, "state"), os.path.join(work, "state-at-10"))
    shutil.copy(os.path.join(work, "state-at-6"), os.path.join(log_dir, "state"))
    message = start_refused("state rolled back to 6 leaves after a checkpoint of 10")
    check("... naming the rollback", "rolled back" in message, message)
    check("... and nothing was cut", os.path.getsize(bundle_path) == bundle_size)
    os.remove(os.path.join(log_dir, "state"))
    message = start_refused("state removed")
    check("... naming it", "no state" in message, message)
    shutil.copy(os.path.join(work, "state-at-10"), os.path.join(log_dir, "state"))
    server = subprocess.Popen(arguments, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    check("with its state back the service starts", wait_ready(base), "no /healthz")
    again = checkpoint(base, verifier_key)
    check("... at the same size and root", again["size"] == 10 and again["root"] == fourth["root"], again)
    stop_process(server)
    check.finish()


if __name__ == "__main__":
    main()
