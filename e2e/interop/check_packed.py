#!/usr/bin/env python3
"""Interop check of FormAttest's FIDO2 `packed` attestations with python-fido2 (run by the Swift
test suite).

usage: check_packed.py ROOT_PEM OTHER_ROOT_PEM RP_ID CASES_JSON

CASES_JSON: a list of {name, packed: {fmt, rpId, clientDataHash, attestationObject}, keyId}.
For each: python-fido2's PackedAttestation verifies the statement (WebAuthn §8.2: certificate
requirements, AAGUID extension, signature over authData || clientDataHash) and an
AttestationVerifier whose ca_lookup returns ROOT_PEM verifies the chain; the authenticator data
names RP_ID, the credential id is the keyId, the AAGUID is FormAttest's. Negatives, one change
each: a signature byte flipped, a clientDataHash byte flipped, and OTHER_ROOT_PEM as the trusted
root, are refused. Prints "N passed, M failed".
"""
import hashlib
import json
import os
import sys

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from fido2 import cbor
from fido2.attestation import AttestationVerifier, PackedAttestation, UntrustedAttestation
from fido2.attestation.base import InvalidSignature
from fido2.webauthn import AttestationObject

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from formattest_support import Checks, b64url_decode as b64url  # noqa: E402

AAGUID = bytes.fromhex("f04a77e57a774e578a66a7e57ab1e000")


def der(pem_path):
    return x509.load_pem_x509_certificate(open(pem_path, "rb").read()).public_bytes(serialization.Encoding.DER)


class Verifier(AttestationVerifier):
    def __init__(self, root):
        super().__init__([PackedAttestation()])
        self.root = root

    def ca_lookup(self, result, auth_data):
        return self.root


def main():
    root, other_root, rp_id, cases_file = der(sys.argv[1]), der(sys.argv[2]), sys.argv[3], sys.argv[4]
    check = Checks()

    def refused(attestation, client_data_hash, trusted):
        try:
            Verifier(trusted).verify_attestation(attestation, client_data_hash)
            return False
        except (InvalidSignature, UntrustedAttestation, ValueError):
            return True

    for case in json.load(open(cases_file)):
        name, packed = case["name"], case["packed"]
        raw = b64url(packed["attestationObject"])
        client_data_hash = b64url(packed["clientDataHash"])
        attestation = AttestationObject(raw)
        check(f"{name}: fmt packed", attestation.fmt == "packed" and packed["fmt"] == "packed")
        try:
            Verifier(root).verify_attestation(attestation, client_data_hash)
            check(f"{name}: python-fido2 verifies the statement and the chain to the deployment's root", True)
        except Exception as error:  # noqa: BLE001 - reported as a failure with its reason
            check(f"{name}: python-fido2 verifies the statement and the chain to the deployment's root", False, repr(error))
        auth = attestation.auth_data
        check(f"{name}: rpIdHash is SHA-256 of the rp id", auth.rp_id_hash == hashlib.sha256(rp_id.encode()).digest() and packed["rpId"] == rp_id)
        check(f"{name}: AT set, counter 0", auth.is_attested() and auth.counter == 0)
        check(f"{name}: the credential id is the keyId", auth.credential_data.credential_id == b64url(case["keyId"]))
        check(f"{name}: the AAGUID is FormAttest's", bytes(auth.credential_data.aaguid) == AAGUID)
        # One change each.
        statement = dict(attestation.att_stmt)
        signature = bytearray(statement["sig"])
        signature[-3] ^= 0x01
        statement["sig"] = bytes(signature)
        flipped = AttestationObject.create("packed", auth, statement)
        check(f"{name}: a flipped signature byte is refused", refused(flipped, client_data_hash, root))
        other_hash = bytearray(client_data_hash)
        other_hash[0] ^= 0x01
        check(f"{name}: another clientDataHash is refused", refused(attestation, bytes(other_hash), root))
        check(f"{name}: another deployment's root is refused", refused(attestation, client_data_hash, other_root))
    check.finish()


if __name__ == "__main__":
    main()
