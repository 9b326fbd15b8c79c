"""Evidence records end to end: a running `formattest-dev serve --dev-simulator --evidence-dir DIR
--evidence-in-answer` archives a record of every accepted form, and `formattest evidence verify`
re-verifies each offline (no store, no network) with the JWKS the service published.

Usage: evidence_end_to_end.py BASE_URL EVIDENCE_DIR FORMATTEST_BINARY WORK_DIR FORMATTEST_DEV_BINARY

Registers a key (the form signed by the attestation), signs two more forms (assertions), replays
one, and checks: each accepted answer names its record (evidenceId, evidenceArchived) and carries
it; the archive holds exactly one file per accepted form, mode 0640, equal to the answer's; each
file verifies with the CLI (exit 0, the right kind, counter and form) and, with one byte changed
anywhere in a sample of positions, or with another server's JWKS, is refused (exit 1). Standard
joserfc (an independent JOSE library) checks the server's signature with the published JWKS, and
jsonschema checks each payload against schemas/evidence-record.schema.json. Prints `N passed, M failed` last and exits non-zero on any failure.
"""

import base64
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys

import jsonschema
from joserfc import jws
from joserfc.jwk import KeySet

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from formattest_support import Checks, b64url_decode, get, post_json as post, transfer_form as form  # noqa: E402

SCHEMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "schemas", "evidence-record.schema.json")


def payload_of(path):
    with open(path, "rb") as handle:
        return b64url_decode(json.load(handle)["payload"])


def check_import(check, run, write, evidence_dir, work, jwks, roots):
    """`formattest evidence import` (issue 34's migration): the archive the service just wrote is
    appended to a new evidence log in acceptance order (verifiedAt, then SHA-256 of the payload),
    each leaf the payload the server signed; the log audits, every record exports as a bundle that
    verifies; a second run appends nothing; an archive with one altered or misnamed file imports
    nothing (or, with --skip-invalid, the rest); an archive imported in two parts gives the same log."""
    status, verifier, err = run("evidence", "log-key", "--name", "bank.example/import-test", "--out", os.path.join(work, "log.key"))
    check("log-key", status == 0, err)
    verifier = verifier.strip()
    key = os.path.join(work, "log.key")

    def import_into(archive, log, *extra):
        return run("evidence", "import", "--archive", archive, "--log", log, "--evidence-log-key", key, "--jwks", jwks, *roots, *extra)

    names = sorted(name for name in os.listdir(evidence_dir) if name.endswith(".json"))
    # The order the command must give, computed here from the records themselves.
    def order_key(name):
        payload = payload_of(os.path.join(evidence_dir, name))
        return (json.loads(payload)["verifiedAt"], hashlib.sha256(payload).digest())
    # RFC 3339 with milliseconds in UTC, all the same length: text order is time order.
    expected = sorted(names, key=order_key)
    log = os.path.join(work, "log")
    status, out, err = import_into(evidence_dir, log)
    check("import: exit 0", status == 0, (status, out, err))
    check("import: every record appended", f"imported {len(names)} records" in out and "0 already in the log" in out, out)
    checkpoint = os.path.join(log, "checkpoint")
    status, out, err = run("evidence", "audit", "--log", log, "--log-key", verifier, "--new", checkpoint)
    check("import: the log audits against its checkpoint", status == 0 and f"audited {len(names)} leaves" in out, (status, out, err))
    for index, name in enumerate(expected):
        bundle = os.path.join(work, f"bundle-{index}.json")
        if os.path.exists(bundle):
            os.remove(bundle)
        status, _, err = run("evidence", "export", "--log", log, "--log-key", verifier, "--index", str(index), "--archive", evidence_dir, "--out", bundle)
        check(f"import: leaf {index} exports with its archived envelope", status == 0, err)
        if status != 0:
            continue
        with open(bundle, "rb") as handle:
            envelope = json.load(handle).get("envelope") or {}
        leaf = b64url_decode(envelope["payload"]) if "payload" in envelope else None
        check(f"import: leaf {index} is {name} (acceptance order)", leaf == payload_of(os.path.join(evidence_dir, name)), name)
        status, out, err = run("evidence", "verify", bundle, "--log-key", verifier, "--jwks", jwks, *roots, "--json")
        check(f"import: leaf {index}'s bundle verifies offline", status == 0 and json.loads(out).get("verified") is True, (status, out, err))

    status, out, err = import_into(evidence_dir, log)
    check("import again: exit 0, nothing appended", status == 0 and "imported 0 records" in out and f"{len(names)} already in the log" in out, (status, out, err))
    status, out, err = run("evidence", "audit", "--log", log, "--log-key", verifier, "--new", checkpoint)
    check("import again: the log still holds exactly the same leaves", status == 0 and f"audited {len(names)} leaves" in out and "more leaves" not in out, (status, out, err))

    # In two parts (as after a run stopped halfway): the same leaves, in the same order.
    part = os.path.join(work, "archive-part")
    os.mkdir(part)
    for name in expected[:-1]:
        shutil.copyfile(os.path.join(evidence_dir, name), os.path.join(part, name))
    log_parts = os.path.join(work, "log-parts")
    status, out, err = import_into(part, log_parts)
    check("import in parts: the first part", status == 0 and f"imported {len(names) - 1} records" in out, (status, out, err))
    status, out, err = import_into(evidence_dir, log_parts)
    check("import in parts: the rest only", status == 0 and "imported 1 records" in out and f"{len(names) - 1} already in the log" in out, (status, out, err))
    with open(os.path.join(log_parts, "checkpoint"), "rb") as a, open(checkpoint, "rb") as b:
        # The same origin, size and root hash (the signatures are Ed25519 over the same text).
        check("import in parts: the same tree as in one run", a.read().split(b"\n\n")[0] == b.read().split(b"\n\n")[0])

    # One altered file: nothing imported, the file named; --skip-invalid imports the others.
    bad = os.path.join(work, "archive-bad")
    shutil.copytree(evidence_dir, bad)
    victim = os.path.join(bad, expected[1])
    with open(victim, "rb") as handle:
        document = json.load(handle)
    payload = json.loads(b64url_decode(document["payload"]))
    payload["username"] = "mallory"
    document["payload"] = base64.urlsafe_b64encode(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()).rstrip(b"=").decode()
    with open(victim, "w") as handle:
        json.dump(document, handle)
    log_bad = os.path.join(work, "log-bad")
    status, out, err = import_into(bad, log_bad)
    check("altered record: exit 1, named, nothing imported", status == 1 and expected[1] in out and "nothing imported" in out, (status, out, err))
    check("altered record: no checkpoint written", not os.path.exists(os.path.join(log_bad, "checkpoint")))
    status, out, err = import_into(bad, log_bad, "--skip-invalid")
    check("--skip-invalid: the others imported, the altered one named, exit 1",
          status == 1 and f"imported {len(names) - 1} records" in out and expected[1] in out and "1 left out" in out, (status, out, err))

    # A record under another name than its id.
    renamed = os.path.join(work, "archive-renamed")
    os.mkdir(renamed)
    shutil.copyfile(os.path.join(evidence_dir, expected[0]), os.path.join(renamed, "A" * 43 + ".json"))
    status, out, err = import_into(renamed, os.path.join(work, "log-renamed"))
    check("a file not named by its record's id: refused", status == 1 and "not named by its record's id" in out, (status, out, err))
    # Usage errors: exit 2, nothing written.
    status, _, err = import_into(os.path.join(work, "no-such-archive"), os.path.join(work, "log-none"))
    check("a missing archive: exit 2", status == 2 and "--archive" in err, (status, err))


def main():
    base, evidence_dir, binary, work, dev_binary = sys.argv[1:6]
    check = Checks()

    def run(*arguments):
        # The simulator's commands are the developer executable's; the product has none.
        executable = dev_binary if arguments[0] == "simulate" else binary
        result = subprocess.run([executable, *arguments], capture_output=True, timeout=120)
        return result.returncode, result.stdout.decode(), result.stderr.decode()

    def write(name, data):
        path = os.path.join(work, name)
        with open(path, "wb") as handle:
            handle.write(data)
        return path

    jwks_bytes = get(base, "/.well-known/jwks.json")
    jwks = write("jwks.json", jwks_bytes)
    keyset = KeySet.import_key_set(json.loads(jwks_bytes))
    with open(SCHEMA) as handle:
        schema = json.load(handle)
    status, root, _ = run("simulate", "root")
    check("simulate root", status == 0)
    status, receipt_root, _ = run("simulate", "root", "--receipt")
    check("simulate root --receipt", status == 0)
    roots = ["--root", write("root.pem", root.encode()), "--receipt-root", write("receipt-root.pem", receipt_root.encode())]

    accepted = []  # (answer, kind, counter, form)
    first = form("10.00")
    status, simulated = post(base, "/api/dev/simulate", {"action": "attest", "form": first})
    check("simulate attest", status == 200, simulated)
    key_id = simulated["keyId"]
    status, answer = post(base, "/api/appattest/attest", {
        "username": "alice", "keyId": key_id, "attestationObject": simulated["attestationObject"], "form": first,
    })
    check("attest accepted", status == 200, answer)
    accepted.append((answer, "attestation", 0, first))
    for counter, amount in ((1, "20.00"), (2, "30.00")):
        body = form(amount)
        status, simulated = post(base, "/api/dev/simulate", {"action": "assert", "keyId": key_id, "form": body})
        check("simulate assert", status == 200, simulated)
        request = {"username": "alice", "keyId": key_id, "assertion": simulated["assertion"], "form": body}
        status, answer = post(base, "/api/appattest/assert", request)
        check(f"assert {counter} accepted", status == 200, answer)
        accepted.append((answer, "assertion", counter, body))
    # A replay is refused and archives nothing.
    status, answer = post(base, "/api/appattest/assert", request)
    check("replay refused", status == 409 and answer.get("error", {}).get("code") == "replay", (status, answer))
    check("a refusal names no record", "evidenceId" not in answer, answer)

    files = sorted(os.listdir(evidence_dir))
    check("one file per accepted form", len(files) == len(accepted), files)
    for answer, kind, counter, body in accepted:
        record_id = answer.get("evidenceId")
        check(f"{kind} {counter}: the answer names its record", isinstance(record_id, str) and len(record_id) == 43, answer.keys())
        check(f"{kind} {counter}: archived", answer.get("evidenceArchived") is True, answer.get("evidenceArchived"))
        path = os.path.join(evidence_dir, f"{record_id}.json")
        if not os.path.exists(path):
            check.fail(f"{kind} {counter}: no file {path}")
            continue
        mode = stat.S_IMODE(os.stat(path).st_mode)
        check(f"{kind} {counter}: mode 0640", mode == 0o640, oct(mode))
        with open(path, "rb") as handle:
            data = handle.read()
        check(f"{kind} {counter}: the answer carries the archived record", json.loads(data) == answer.get("evidence"))
        try:
            signed = jws.deserialize_json(json.loads(data), keyset)
            payload = json.loads(signed.payload)
            check(f"{kind} {counter}: joserfc verifies the server's signature", signed.headers().get("typ") == "formattest-evidence+json", signed.headers())
            jsonschema.validate(payload, schema)
            check(f"{kind} {counter}: the payload follows the schema", True)
            check(f"{kind} {counter}: the payload's form and kind", (payload["kind"], payload["counter"], payload["username"]) == (kind, counter, "alice"), payload)
        except Exception as error:  # noqa: BLE001 - any failure of an independent check is a test failure
            check.fail(f"{kind} {counter}: independent checks: {error!r}")

        status, out, err = run("evidence", "verify", path, "--jwks", jwks, *roots, "--json")
        report = json.loads(out) if status == 0 else {}
        check(f"{kind} {counter}: verifies offline", status == 0, (status, out, err))
        check(f"{kind} {counter}: kind, counter, id", (report.get("kind"), report.get("counter"), report.get("id")) == (kind, counter, record_id), report)
        check(f"{kind} {counter}: the form is the one sent", json.loads(report.get("form", "null")) == body, report.get("form"))
        status, out, err = run("evidence", "verify", path, "--jwks", jwks, *roots)
        check(f"{kind} {counter}: text report", status == 0 and "verified: true" in out, (status, out, err))

        # Apple's root alone (the service's policy names it too): the simulator's key does not chain to it.
        status, out, _ = run("evidence", "verify", path, "--jwks", jwks, "--json")
        check(f"{kind} {counter}: refused against Apple's root", status == 1 and json.loads(out)["error"]["code"] == "evidence_key_attestation_invalid", out)
        # Another server's JWKS.
        other = write("other-jwks.json", b'{"keys":[]}')
        status, out, _ = run("evidence", "verify", path, "--jwks", other, *roots, "--json")
        check(f"{kind} {counter}: refused with another JWKS", status == 1 and json.loads(out)["error"]["code"] == "evidence_unknown_signer", out)

    check_import(check, run, write, evidence_dir, work, jwks, roots)

    # One byte changed in the first record's file, at positions spread over all of it.
    with open(os.path.join(evidence_dir, files[0]), "rb") as handle:
        data = handle.read()
    for position in range(0, len(data), max(1, len(data) // 40)):
        changed = bytearray(data)
        changed[position] ^= 0x01
        status, out, err = run("evidence", "verify", write("changed.json", bytes(changed)), "--jwks", jwks, *roots, "--json")
        check(f"byte {position} changed: refused", status == 1, (status, out, err))

    # A missing file is a usage error (exit 2), not a rejection.
    status, _, err = run("evidence", "verify", os.path.join(work, "missing.json"), "--jwks", jwks)
    check("missing file: exit 2", status == 2 and "missing.json" in err, (status, err))

    check.finish()


if __name__ == "__main__":
    main()
