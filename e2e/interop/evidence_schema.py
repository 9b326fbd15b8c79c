"""schemas/evidence-record.schema.json against the kept records (Tests/Fixtures/evidence).

Each record's payload (the JWS's, base64url) validates against the schema with jsonschema
(Draft 2020-12), and a record changed in one way the schema forbids does not: a version 1 or 2
record given passkey members, a version-3 record without its passkey or of another kind, a
passkey-alone record with an App Attest member. Prints `N passed, M failed`; exits 1 on a failure.

Usage: evidence_schema.py SCHEMA FIXTURES_DIR
"""

import base64
import json
import sys

from jsonschema import Draft202012Validator


def payload(path):
    with open(path, encoding="utf-8") as file:
        envelope = json.load(file)
    text = envelope["payload"]
    return json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def changed(record, **members):
    copy = dict(record)
    for name, value in members.items():
        if value is None:
            copy.pop(name, None)
        else:
            copy[name] = value
    return copy


def main():
    schema_path, fixtures = sys.argv[1], sys.argv[2]
    with open(schema_path, encoding="utf-8") as file:
        validator = Draft202012Validator(json.load(file))
    passed = failed = 0

    def expect(name, record, valid):
        nonlocal passed, failed
        errors = list(validator.iter_errors(record))
        if (not errors) == valid:
            passed += 1
        else:
            failed += 1
            print(f"FAIL {name}: expected {'valid' if valid else 'invalid'}; {errors[:1]}")

    records = {name: payload(f"{fixtures}/{name}.json") for name in ["v1-assertion", "v2-assertion", "v3-passkey", "v3-both"]}
    passkey = records["v3-passkey"]
    for name, record in records.items():
        expect(name, record, True)
    for name in ["v1-assertion", "v2-assertion"]:
        expect(f"{name} with a passkey", changed(records[name], passkey=passkey["passkey"], amr=passkey["amr"]), False)
        expect(f"{name} as kind passkey", changed(records[name], kind="passkey"), False)
    for name in ["v3-passkey", "v3-both"]:
        expect(f"{name} without its passkey", changed(records[name], passkey=None), False)
        expect(f"{name} as kind pooled", changed(records[name], kind="pooled"), False)
        expect(f"{name} with an amr value RFC 8176 has but FormAttest never states", changed(records[name], amr=["pin"]), False)
    expect("v3-passkey with a keyId", changed(passkey, keyId="AAAA"), False)
    expect("v3-both without its key's attestation", changed(records["v3-both"], keyAttestation=None), False)
    assertion = dict(passkey["passkey"]["assertion"])
    del assertion["signature"]
    expect("v3-passkey without the assertion's signature", changed(passkey, passkey=dict(passkey["passkey"], assertion=assertion)), False)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
