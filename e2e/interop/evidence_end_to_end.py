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

import json
import os
import stat
import subprocess
import sys

import jsonschema
from joserfc import jws
from joserfc.jwk import KeySet

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from formattest_support import Checks, get, post_json as post, transfer_form as form  # noqa: E402

SCHEMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "schemas", "evidence-record.schema.json")


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
