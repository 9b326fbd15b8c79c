#!/usr/bin/env python3
"""Interop checks of FormAttest's tokens with standard libraries (run by the Swift test suite).

usage: check_tokens.py WRAPPED_DIR JWKS_FILE ASSERTIONS_FILE SCHEMA_FILE

- Every WRAPPED_DIR/*.json output of `formattest wrap` validates against the FIDO2 wrapper schema.
- python-fido2 loads credential.publicKey as a COSE key and verifies each real App Attest assertion
  in ASSERTIONS_FILE (JSON list of {name, assertion_b64, client_data_hash_hex}) with it.
- joserfc verifies every serverAttestation JWS with the JWKS, and rejects each one altered by one byte.
Prints "N passed, M failed" and exits non-zero on any failure.
"""
import base64
import glob
import hashlib
import json
import os
import sys

import jsonschema
from fido2 import cbor
from fido2.cose import CoseKey
from joserfc import jwk, jwt
from joserfc.errors import JoseError

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from formattest_support import Checks, b64url_decode as b64url  # noqa: E402


def main():
    wrapped_dir, jwks_file, assertions_file, schema_file = sys.argv[1:5]
    schema = json.load(open(schema_file))
    keyset = jwk.KeySet.import_key_set(json.load(open(jwks_file)))
    assertions = {a["name"]: a for a in json.load(open(assertions_file))}
    check = Checks()

    files = sorted(glob.glob(os.path.join(wrapped_dir, "*.json")))
    check("at least one wrapped file", len(files) > 0)
    for path in files:
        name = os.path.splitext(os.path.basename(path))[0]
        document = json.load(open(path))
        wrapper = document["fido2Wrapper"]
        try:
            jsonschema.validate(wrapper, schema)
            check(f"{name}: schema", True)
        except jsonschema.ValidationError as error:
            check(f"{name}: schema ({error.message})", False)

        key = CoseKey.parse(cbor.decode(b64url(wrapper["credential"]["publicKey"])))
        check(f"{name}: COSE key is ES256", key.ALGORITHM == -7)
        if name in assertions:
            recorded = assertions[name]
            outer = cbor.decode(base64.b64decode(recorded["assertion_b64"]))
            nonce = hashlib.sha256(outer["authenticatorData"] + bytes.fromhex(recorded["client_data_hash_hex"])).digest()
            try:
                key.verify(nonce, outer["signature"])
                check(f"{name}: fido2 verifies the real assertion", True)
            except Exception as error:  # cryptography's InvalidSignature
                check(f"{name}: fido2 verifies the real assertion ({error!r})", False)
            try:
                key.verify(nonce[:-1] + bytes([nonce[-1] ^ 1]), outer["signature"])
                check(f"{name}: fido2 rejects another message", False)
            except Exception:
                check(f"{name}: fido2 rejects another message", True)

        token = document.get("serverAttestation")
        if token:
            decoded = jwt.decode(token, keyset, algorithms=["ES256"])
            claims = decoded.claims
            check(f"{name}: jws header", decoded.header.get("typ") == "formattest-attestation+jwt" and decoded.header.get("kid"))
            check(f"{name}: jws key_id", claims["key_id"] == wrapper["original"]["keyId"])
            check(f"{name}: jws form_hash", claims["form_hash"] == wrapper["original"]["clientDataHash"])
            check(f"{name}: jws cnf", claims["cnf"]["jwk"]["kty"] == "EC" and claims["exp"] - claims["iat"] == 300)
            header, payload, signature = token.split(".")
            altered_payload = payload[:-2] + ("A" if payload[-2] != "A" else "B") + payload[-1]
            for altered in (f"{header}.{altered_payload}.{signature}", f"{header}.{payload}.{signature[:-2]}{'A' if signature[-2] != 'A' else 'B'}{signature[-1]}"):
                try:
                    jwt.decode(altered, keyset, algorithms=["ES256"])
                    check(f"{name}: altered jws rejected", False)
                except (JoseError, ValueError):
                    check(f"{name}: altered jws rejected", True)

    check.finish()


if __name__ == "__main__":
    main()
