#!/usr/bin/env python3
"""Interop of FormAttest's passkey verifier with py_webauthn on a real browser's responses
(issue 30, item 6).

usage: passkey_interop.py FORMATTEST_BINARY [--table PATH]

Headless Chromium (Debian's chromium + chromium-driver, Selenium 4.38) opens a minimal page that
this script serves on http://localhost:PORT (a secure context; the relying party id is
`localhost`) and makes WebAuthn responses with its virtual authenticator (DevTools' WebAuthn
domain: CTAP2, the internal transport, resident keys), recorded in the PublicKeyCredential.toJSON()
shape:
- `uv`: user verification on, the backup flags off: a registration with attestation `none`, a
  registration with attestation `direct` (Chromium answers `packed` with its batch certificate),
  and two assertions (the authenticator's count going up between them);
- `no-uv`: an authenticator without user verification: a registration and an assertion, UV off;
- `synced`: user verification on and the backup flags on (BE and BS, a synced passkey's shape): a
  registration and an assertion;
- `eddsa` and `rs256`: user verification on, an EdDSA (Ed25519) and an RS256 credential instead of
  the others' ES256: a registration and an assertion each.
The assertions' challenge is SHA-256 of the RFC 8785 bytes of a transfer form (the clientDataHash
App Attest signs; `formattest verify passkey-assertion --form` derives it from the form), the
registrations' a random 32-byte server challenge (`--challenge`).

Then, for each response and each one-change mutation of it, py_webauthn 3.0.1
(verify_registration_response / verify_authentication_response) and `formattest verify
passkey-registration | passkey-assertion --json` each give a verdict, with the same settings (rp
id, origins, user verification required or not, stored sign count, the COSE key each library got
from the registration). A mutation of signed data that is about a flag, a field or a counter
rather than the signature is re-signed with the credential's private key, read back from the
virtual authenticator (WebAuthn.getCredentials): the signature over authenticatorData ‖
SHA-256(clientDataJSON) is made anew, so the mutation meets the one check it names (the
re-signed unchanged response is accepted by both, which shows the re-signing is right). A
registration with attestation `none` has no signature, so its mutations need none; a `packed`
one's would need the batch key, which Chromium does not give: there a changed flag is the
attestation signature's case.

Each case states the verdict expected of each library and, for a refusal, FormAttest's error code
and py_webauthn's message: the two must agree (both accept or both refuse), except in the few
cases listed in DIFFERENCES, where they differ by design, each with the specification's section;
such a case checks that they differ exactly as listed. Accepted cases also compare what the two
report (credential id, sign count, UV, BE, BS; for registrations the COSE key, the format, the
AAGUID). Prints the table (Markdown; `--table PATH` also writes it), then "N passed, M failed".
"""
import base64
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from webauthn import verify_authentication_response, verify_registration_response
from webauthn.helpers import decode_credential_public_key, decoded_public_key_to_cryptography, parse_cbor
from webauthn.helpers.exceptions import WebAuthnException

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from formattest_support import Checks, transfer_form  # noqa: E402

RP_ID = "localhost"
OTHER_RP_ID = "example.com"
EVIL_ORIGIN = "https://evil.example"

UP, UV, BE, BS, AT, ED = 0x01, 0x04, 0x08, 0x10, 0x40, 0x80

# The authenticators whose point is the credential's key type (COSE alg): EdDSA and RS256 beside
# the others' ES256.
KEY_TYPES = {"eddsa": -8, "rs256": -257}

# Where the two libraries differ by design. A case that names one of these expects py_webauthn
# and FormAttest to differ exactly as its expectations say; every other case expects agreement.
DIFFERENCES = {
    "cross-origin": (
        "W3C WebAuthn Level 3 §7.1 and §7.2, the step 'if C.crossOrigin is present and set to true, "
        "verify that the Relying Party expects this credential to be used within an iframe that is not "
        "same-origin with its ancestors'. FormAttest refuses it unless its policy allows it "
        "(WebAuthnPolicy.allowCrossOrigin, off by default); py_webauthn 3.0.1 reads crossOrigin and "
        "does not check it."
    ),
    "duplicate-member": (
        "clientDataJSON is parsed once, strictly (docs/passkeys.md): a repeated member is refused "
        "(passkey_malformed_client_data), so no two readers of the same bytes can see two origins. "
        "py_webauthn parses it with Python's json module, where the last repeated member wins, as in "
        "JSON.parse; a browser's serialization of the client data (§5.8.1.1) never repeats one. "
        "FormAttest is the stricter."
    ),
    "credential-id": (
        "§7.1: the credential record is created with the credentialId of authData's attested "
        "credential data. FormAttest also refuses a registration whose rawId names another "
        "credential (passkey_credential_id_mismatch); py_webauthn compares id with rawId only and "
        "returns authData's credentialId. FormAttest is the stricter; neither would store the wrong id."
    ),
}

# Not differences, but what neither function can check, said here rather than left silent: §7.2
# steps 5 and 6 (the credential is one the ceremony allowed and the user's; the userHandle, when
# present, is that user's) are the relying party's lookup before verification. Neither
# verify_authentication_response nor `formattest verify passkey-assertion` is given the user or
# the allowed credentials, so both accept a response whose userHandle, or whose id and rawId
# together, name someone else (the userHandle is not signed; the id only selects the stored key).
# FormAttest's flows do both: the key is looked up by rawId among the signed-in user's passkeys
# (passkey_mismatch) and the userHandle must be that passkey's user (passkey_user_handle_mismatch),
# in FormAttestFlowsTests/PasskeyFlowTests. The cases "userHandle of another user" and "id and rawId
# of another credential" show the shared boundary.


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text):
    text = text.replace("+", "-").replace("/", "_").rstrip("=")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def canonical(form):
    """RFC 8785 for a form of ASCII string members (keys sorted, no whitespace): what
    `formattest hash` computes, checked against it below."""
    return json.dumps(form, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


# MARK: - The browser


PAGE = b"<!doctype html><meta charset=utf-8><title>passkey interop</title><p>passkey interop"


class PageHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("content-type", "text/html; charset=utf-8")
        self.send_header("content-length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *arguments):
        pass


CREATE = """
const [challenge, userID, userVerification, attestation, algorithm, done] = arguments;
const bytes = (text) => Uint8Array.from(atob(text.replace(/-/g, '+').replace(/_/g, '/')), (c) => c.charCodeAt(0));
navigator.credentials.create({publicKey: {
    challenge: bytes(challenge), rp: {id: 'localhost', name: 'FormAttest interop'},
    user: {id: bytes(userID), name: 'alice', displayName: 'Alice'},
    pubKeyCredParams: [{type: 'public-key', alg: algorithm}],
    authenticatorSelection: {residentKey: 'required', userVerification}, attestation}})
  .then((credential) => done(credential.toJSON()), (error) => done({error: String(error)}));
"""

GET = """
const [challenge, credentialID, userVerification, done] = arguments;
const bytes = (text) => Uint8Array.from(atob(text.replace(/-/g, '+').replace(/_/g, '/')), (c) => c.charCodeAt(0));
navigator.credentials.get({publicKey: {
    challenge: bytes(challenge), rpId: 'localhost',
    allowCredentials: [{type: 'public-key', id: bytes(credentialID)}], userVerification}})
  .then((credential) => done(credential.toJSON()), (error) => done({error: String(error)}));
"""


def record(origin, form_hash):
    """Chromium's responses, by authenticator (`uv`, `no-uv`, `synced`, `eddsa`, `rs256`): the registration (attestation
    none) and its challenge, for `uv` also the `direct` one (packed) and its challenge, the
    credential's private key (PKCS#8, read back with WebAuthn.getCredentials) and the assertion over
    `form_hash`. Each authenticator is alone in the browser while it is used."""
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    recorded = {}
    try:
        driver.set_script_timeout(60)
        driver.get(origin + "/")
        if not driver.execute_script("return window.isSecureContext && !!window.PublicKeyCredential"):
            raise SystemExit(f"{origin} is not a secure context with WebAuthn")
        driver.execute_cdp_cmd("WebAuthn.enable", {})
        settings = {
            "uv": dict(uv=True, backup=False, algorithm=-7),
            "no-uv": dict(uv=False, backup=False, algorithm=-7),
            "synced": dict(uv=True, backup=True, algorithm=-7),
            "eddsa": dict(uv=True, backup=False, algorithm=-8),
            "rs256": dict(uv=True, backup=False, algorithm=-257),
        }
        for name, setting in settings.items():
            authenticator = driver.execute_cdp_cmd("WebAuthn.addVirtualAuthenticator", {"options": {
                "protocol": "ctap2", "transport": "internal", "hasResidentKey": True,
                "hasUserVerification": setting["uv"], "isUserVerified": setting["uv"],
                "automaticPresenceSimulation": True,
                "defaultBackupEligibility": setting["backup"], "defaultBackupState": setting["backup"],
            }})["authenticatorId"]
            wanted = "required" if setting["uv"] else "discouraged"
            entry = {}
            # The no-uv registration's challenge begins with '-' in base64url (a first byte of
            # 0xF8-0xFB), as one random challenge in 64 does: the command line must take it.
            entry["registration-challenge"] = (b"\xf8" if name == "no-uv" else b"") + os.urandom(32 if name != "no-uv" else 31)
            entry["registration"] = driver.execute_async_script(
                CREATE, b64url(entry["registration-challenge"]), b64url(os.urandom(16)), wanted, "none", setting["algorithm"])
            if "error" in entry["registration"]:
                raise SystemExit(f"{name}: navigator.credentials.create failed: {entry['registration']['error']}")
            if name == "uv":
                entry["packed-challenge"] = os.urandom(32)
                entry["registration-packed"] = driver.execute_async_script(
                    CREATE, b64url(entry["packed-challenge"]), b64url(os.urandom(16)), wanted, "direct", setting["algorithm"])
                if "error" in entry["registration-packed"]:
                    raise SystemExit(f"{name}: the direct registration failed: {entry['registration-packed']['error']}")
            credential_id = entry["registration"]["rawId"]
            stored = driver.execute_cdp_cmd("WebAuthn.getCredentials", {"authenticatorId": authenticator})["credentials"]
            mine = [c for c in stored if unb64(c["credentialId"]) == unb64(credential_id)]
            if len(mine) != 1:
                raise SystemExit(f"{name}: the authenticator does not hold the registered credential")
            entry["private-key"] = unb64(mine[0]["privateKey"])
            entry["assertion"] = driver.execute_async_script(GET, b64url(form_hash), credential_id, wanted)
            if "error" in entry["assertion"]:
                raise SystemExit(f"{name}: navigator.credentials.get failed: {entry['assertion']['error']}")
            if name == "uv":
                # A second use of the credential: the authenticator's own count goes up.
                entry["later-assertion"] = driver.execute_async_script(GET, b64url(form_hash), credential_id, wanted)
                if "error" in entry["later-assertion"]:
                    raise SystemExit(f"{name}: the second navigator.credentials.get failed: {entry['later-assertion']['error']}")
            driver.execute_cdp_cmd("WebAuthn.removeVirtualAuthenticator", {"authenticatorId": authenticator})
            recorded[name] = entry
    finally:
        driver.quit()
    return recorded


# MARK: - The two verdicts


class Verdict:
    def __init__(self, accepted, detail, report=None):
        self.accepted = accepted
        self.detail = detail
        self.report = report or {}

    def cell(self):
        return "accept" if self.accepted else f"refuse: {self.detail}"


def py_verdict(case):
    try:
        if case.ceremony == "registration":
            result = verify_registration_response(
                credential=case.response, expected_challenge=case.challenge, expected_rp_id=case.rp_id,
                expected_origin=case.origins, require_user_verification=case.require_uv)
            return Verdict(True, "", {
                "credentialId": b64url(result.credential_id), "signCount": result.sign_count,
                "userVerified": result.user_verified, "backupEligible": result.credential_device_type == "multi_device",
                "backedUp": result.credential_backed_up, "format": str(getattr(result.fmt, "value", result.fmt)),
                "aaguid": result.aaguid, "publicKey": parse_cbor(result.credential_public_key),
            })
        result = verify_authentication_response(
            credential=case.response, expected_challenge=case.challenge, expected_rp_id=case.rp_id,
            expected_origin=case.origins, credential_public_key=case.public_key_py,
            credential_current_sign_count=case.previous_sign_count, require_user_verification=case.require_uv)
        return Verdict(True, "", {
            "credentialId": b64url(result.credential_id), "signCount": result.new_sign_count,
            "userVerified": result.user_verified, "backupEligible": result.credential_device_type == "multi_device",
            "backedUp": result.credential_backed_up,
        })
    except WebAuthnException as error:
        return Verdict(False, f"{type(error).__name__}: {error}")
    except Exception as error:  # noqa: BLE001: a crash is a refusal too, but it is named as one
        return Verdict(False, f"unexpected {type(error).__name__}: {error}")


def formattest_verdict(binary, work, case):
    response = os.path.join(work, "response.json")
    with open(response, "w") as file:
        json.dump(case.response, file)
    arguments = [binary, "verify", f"passkey-{case.ceremony}", "--response", response, "--rp-id", case.rp_id, "--json"]
    for origin in case.origins:
        arguments += ["--origin", origin]
    if case.form is not None:
        form = os.path.join(work, "form.json")
        with open(form, "wb") as file:
            file.write(json.dumps(case.form).encode())
        arguments += ["--form", form]
    else:
        # `--name=value`: a base64url value may begin with '-', which would read as an option.
        arguments.append("--challenge=" + b64url(case.challenge))
    if case.require_uv:
        arguments.append("--require-user-verification")
    if case.ceremony == "assertion":
        arguments += ["--public-key=" + case.public_key_ft, "--previous-sign-count", str(case.previous_sign_count)]
    run = subprocess.run(arguments, capture_output=True, text=True, timeout=60)
    if run.returncode not in (0, 1):
        raise SystemExit(f"formattest exited {run.returncode} on {case.name}: {run.stdout} {run.stderr}")
    answer = json.loads(run.stdout)
    if run.returncode == 0 and answer.get("verified") is True:
        report = {key: answer.get(key) for key in ("credentialId", "signCount", "userVerified", "backupEligible", "backedUp")}
        if case.ceremony == "registration":
            report.update(format=answer.get("format"), aaguid=answer.get("aaguid"), publicKey=parse_cbor(unb64(answer["publicKey"])))
        return Verdict(True, "", report)
    if run.returncode == 1 and answer.get("verified") is False:
        return Verdict(False, answer["error"]["code"])
    raise SystemExit(f"formattest's exit status {run.returncode} and answer disagree on {case.name}: {run.stdout}")


# MARK: - Cases


class Case:
    """One response with one change, the settings both libraries get, and what each must say."""

    def __init__(self, ceremony, authenticator, name, response, *, settings, expect, code=None, py=None,
                 py_expect=None, difference=None):
        self.ceremony = ceremony
        self.authenticator = authenticator
        self.name = name
        self.response = response
        self.rp_id = settings["rp_id"]
        self.origins = settings["origins"]
        self.require_uv = settings["require_uv"]
        self.challenge = settings["challenge"]
        self.form = settings.get("form")
        self.previous_sign_count = settings.get("previous_sign_count", 0)
        self.public_key_py = settings.get("public_key_py")
        self.public_key_ft = settings.get("public_key_ft")
        self.expect_ft = expect
        self.expect_py = expect if py_expect is None else py_expect
        self.code = code
        self.py = py
        self.difference = difference
        if (not self.expect_ft and not code) or (not self.expect_py and not py):
            raise SystemExit(f"the case {name!r} expects a refusal without saying which check refuses it")


def client_data(response):
    return unb64(response["response"]["clientDataJSON"])


def with_client_data(response, changes=None, raw=None):
    """The response with clientDataJSON's members changed (order kept, Chromium's compact form)."""
    if raw is None:
        members = json.loads(client_data(response))
        members.update(changes)
        raw = json.dumps(members, separators=(",", ":")).encode()
    changed = json.loads(json.dumps(response))
    changed["response"]["clientDataJSON"] = b64url(raw)
    return changed


def authenticator_data_of(response):
    if "attestationObject" in response["response"]:
        return parse_cbor(unb64(response["response"]["attestationObject"]))["authData"]
    return unb64(response["response"]["authenticatorData"])


def with_authenticator_data(response, data):
    """The response with new authenticator data: in an assertion the member; in a registration the
    bytes inside the attestation object, patched in place (same length, the CBOR otherwise
    byte-identical) or, for a new length, the object re-encoded."""
    changed = json.loads(json.dumps(response))
    changed["response"]["authenticatorData"] = b64url(data)
    if "attestationObject" in response["response"]:
        raw = unb64(response["response"]["attestationObject"])
        old = parse_cbor(raw)["authData"]
        if len(old) != len(data) or raw.count(old) != 1:
            raise SystemExit("only same-length authenticator data is patched into an attestation object")
        changed["response"]["attestationObject"] = b64url(raw.replace(old, data))
    return changed


def flags(data, set_bits=0, clear_bits=0):
    return data[:32] + bytes([(data[32] | set_bits) & ~clear_bits & 0xFF]) + data[33:]


def with_count(data, count):
    return data[:33] + count.to_bytes(4, "big") + data[37:]


def sign(key, data):
    """A signature of the credential's algorithm: ES256 (DER), EdDSA (Ed25519) or RS256 (PKCS#1 v1.5)."""
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return key.sign(data, ec.ECDSA(hashes.SHA256()))
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key.sign(data)
    if isinstance(key, rsa.RSAPrivateKey):
        return key.sign(data, padding.PKCS1v15(), hashes.SHA256())
    raise SystemExit(f"no signer for {type(key).__name__}")


def resigned(response, key):
    """The assertion signed anew over its (changed) authenticatorData ‖ SHA-256(clientDataJSON)."""
    changed = json.loads(json.dumps(response))
    signed = unb64(response["response"]["authenticatorData"]) + hashlib.sha256(client_data(response)).digest()
    changed["response"]["signature"] = b64url(sign(key, signed))
    return changed


def with_member(response, path, value):
    changed = json.loads(json.dumps(response))
    target = changed
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return changed


def registration_cases(name, entry, origin, accept_settings):
    """The registration (attestation none) and its mutations; none are signed."""
    response = entry["registration"]
    data = authenticator_data_of(response)
    base = dict(rp_id=RP_ID, origins=[origin], require_uv=accept_settings["require_uv"], challenge=entry["registration-challenge"])
    cases = []

    def case(change, changed, expect, code=None, py=None, settings=None, **extra):
        cases.append(Case("registration", name, change, changed, settings=dict(base, **(settings or {})), expect=expect,
                          code=code, py=py, **extra))

    case("none (as recorded)", response, True)
    if name in KEY_TYPES:
        return cases
    case("origin (clientDataJSON)", with_client_data(response, {"origin": EVIL_ORIGIN}), False,
         "passkey_origin_not_allowed", "Unexpected client data origin")
    case("origin (expected another)", response, False, "passkey_origin_not_allowed", "Unexpected client data origin",
         settings={"origins": [EVIL_ORIGIN]})
    case("type webauthn.get", with_client_data(response, {"type": "webauthn.get"}), False,
         "passkey_type_mismatch", "Unexpected client data type")
    case("challenge (clientDataJSON)", with_client_data(response, {"challenge": b64url(os.urandom(32))}), False,
         "passkey_challenge_mismatch", "challenge was not expected challenge")
    case("rpIdHash of another rp id", with_authenticator_data(response, hashlib.sha256(OTHER_RP_ID.encode()).digest() + data[32:]),
         False, "passkey_rp_id_mismatch", "Unexpected RP ID hash")
    case("rp id (expected another)", response, False, "passkey_rp_id_mismatch", "Unexpected RP ID hash",
         settings={"rp_id": OTHER_RP_ID})
    case("UP cleared", with_authenticator_data(response, flags(data, clear_bits=UP)), False,
         "passkey_user_not_present", "User presence was required")
    if data[32] & UV:
        case("UV cleared, UV required", with_authenticator_data(response, flags(data, clear_bits=UV)), False,
             "passkey_user_not_verified", "User verification is required", settings={"require_uv": True})
        case("UV cleared, UV not required", with_authenticator_data(response, flags(data, clear_bits=UV)), True,
             settings={"require_uv": False})
    else:
        case("UV off, UV required", response, False, "passkey_user_not_verified", "User verification is required",
             settings={"require_uv": True})
    if data[32] & BE:
        case("BE cleared (BS set: BS without BE)", with_authenticator_data(response, flags(data, clear_bits=BE)), False,
             "passkey_backup_state_invalid", "InvalidBackupFlags")
        case("BS cleared (BE stays)", with_authenticator_data(response, flags(data, clear_bits=BS)), True)
    else:
        case("BS set without BE", with_authenticator_data(response, flags(data, set_bits=BS)), False,
             "passkey_backup_state_invalid", "InvalidBackupFlags")
        case("BE set (BS clear)", with_authenticator_data(response, flags(data, set_bits=BE)), True)
    case("AT cleared (credential data left: trailing bytes)", with_authenticator_data(response, flags(data, clear_bits=AT)),
         False, "passkey_malformed_authenticator_data", "attestationObject was malformed")
    case("crossOrigin true", with_client_data(response, {"crossOrigin": True}), False, "passkey_cross_origin_not_allowed",
         py_expect=True, difference="cross-origin")
    other = b64url(os.urandom(32))
    case("id and rawId of another credential", with_member(with_member(response, ["id"], other), ["rawId"], other), False,
         "passkey_credential_id_mismatch", py_expect=True, difference="credential-id")
    return cases


def packed_cases(entry, origin):
    """Chromium's `packed` registration (its batch certificate): the attestation signature covers
    authData ‖ SHA-256(clientDataJSON), and the batch key is Chromium's own."""
    response = entry["registration-packed"]
    data = authenticator_data_of(response)
    base = dict(rp_id=RP_ID, origins=[origin], require_uv=True, challenge=entry["packed-challenge"])
    raw = unb64(response["response"]["attestationObject"])
    statement = parse_cbor(raw)["attStmt"]
    signature = statement["sig"]
    flipped = signature[:-1] + bytes([signature[-1] ^ 0x01])
    if raw.count(signature) != 1:
        raise SystemExit("the packed signature is not found once in the attestation object")
    bad_signature = with_member(response, ["response", "attestationObject"], b64url(raw.replace(signature, flipped)))
    return [
        Case("registration", "uv", "packed (as recorded)", response, settings=base, expect=True),
        Case("registration", "uv", "packed: attestation signature, one bit", bad_signature, settings=base, expect=False,
             code="passkey_attestation_signature_invalid", py="Could not verify attestation statement signature"),
        Case("registration", "uv", "packed: UV cleared (attestation not re-signed)",
             with_authenticator_data(response, flags(data, clear_bits=UV)), settings=dict(base, require_uv=False),
             expect=False, code="passkey_attestation_signature_invalid", py="Could not verify attestation statement signature"),
        Case("registration", "uv", "packed: origin (signed clientDataJSON)", with_client_data(response, {"origin": EVIL_ORIGIN}),
             settings=base, expect=False, code="passkey_origin_not_allowed", py="Unexpected client data origin"),
    ]


def assertion_cases(name, entry, origin, form, other_form, public_key_py, public_key_ft, registered_count):
    response = entry["assertion"]
    key = serialization.load_der_private_key(entry["private-key"], password=None)
    data = authenticator_data_of(response)
    count = int.from_bytes(data[33:37], "big")
    require_uv = bool(data[32] & UV)
    base = dict(rp_id=RP_ID, origins=[origin], require_uv=require_uv, challenge=hashlib.sha256(canonical(form)).digest(),
                form=form, previous_sign_count=registered_count, public_key_py=public_key_py, public_key_ft=public_key_ft)
    cases = []

    def case(change, changed, expect, code=None, py=None, settings=None, **extra):
        cases.append(Case("assertion", name, change, changed, settings=dict(base, **(settings or {})), expect=expect,
                          code=code, py=py, **extra))

    def signed(changed_data=None, changed_client_data=None):
        changed = response
        if changed_data is not None:
            changed = with_authenticator_data(changed, changed_data)
        if changed_client_data is not None:
            changed = with_client_data(changed, changed_client_data)
        return resigned(changed, key)

    case("as recorded", response, True)
    if name in KEY_TYPES:
        case("re-signed, unchanged", signed(), True)
        case("UV cleared (re-signed), UV required", signed(flags(data, clear_bits=UV)), False, "passkey_user_not_verified",
             "User verification is required")
        case("sign count equal to the stored one", response, False, "passkey_sign_count_not_increasing",
             "was not greater than", settings={"previous_sign_count": count})
        signature = unb64(response["response"]["signature"])
        case("signature, one bit",
             with_member(response, ["response", "signature"], b64url(signature[:-1] + bytes([signature[-1] ^ 1]))), False,
             "passkey_signature_invalid", "Could not verify authentication signature")
        return cases
    if name != "uv":
        if not require_uv:
            case("UV off, UV required", response, False, "passkey_user_not_verified", "User verification is required",
                 settings={"require_uv": True})
            case("UV set (re-signed), UV required", signed(flags(data, set_bits=UV)), True, settings={"require_uv": True})
        if data[32] & BE:
            case("BE cleared (re-signed; BS set: BS without BE)", signed(flags(data, clear_bits=BE)), False,
                 "passkey_backup_state_invalid", "InvalidBackupFlags")
            case("BS cleared (re-signed; BE stays)", signed(flags(data, clear_bits=BS)), True)
        return cases
    case("re-signed, unchanged", signed(), True)
    case("origin (re-signed)", signed(changed_client_data={"origin": EVIL_ORIGIN}), False, "passkey_origin_not_allowed",
         "Unexpected client data origin")
    case("origin with a trailing slash (re-signed)", signed(changed_client_data={"origin": origin + "/"}), False,
         "passkey_origin_not_allowed", "Unexpected client data origin")
    case("origin (expected another)", response, False, "passkey_origin_not_allowed", "Unexpected client data origin",
         settings={"origins": [EVIL_ORIGIN]})
    case("rpIdHash of another rp id (re-signed)", signed(hashlib.sha256(OTHER_RP_ID.encode()).digest() + data[32:]), False,
         "passkey_rp_id_mismatch", "Unexpected RP ID hash")
    case("rp id (expected another)", response, False, "passkey_rp_id_mismatch", "Unexpected RP ID hash",
         settings={"rp_id": OTHER_RP_ID})
    case("type webauthn.create (re-signed)", signed(changed_client_data={"type": "webauthn.create"}), False,
         "passkey_type_mismatch", "Unexpected client data type")
    case("challenge: another form's hash (re-signed)",
         signed(changed_client_data={"challenge": b64url(hashlib.sha256(canonical(other_form)).digest())}), False,
         "passkey_challenge_mismatch", "challenge was not expected challenge")
    case("form: the amount changed after signing", response, False, "passkey_challenge_mismatch",
         "challenge was not expected challenge",
         settings={"form": other_form, "challenge": hashlib.sha256(canonical(other_form)).digest()})
    case("UV cleared (re-signed), UV required", signed(flags(data, clear_bits=UV)), False, "passkey_user_not_verified",
         "User verification is required")
    case("UV cleared (re-signed), UV not required", signed(flags(data, clear_bits=UV)), True, settings={"require_uv": False})
    case("UP cleared (re-signed)", signed(flags(data, clear_bits=UP)), False, "passkey_user_not_present",
         "User was not present")
    case("BS set without BE (re-signed)", signed(flags(data, set_bits=BS)), False, "passkey_backup_state_invalid",
         "InvalidBackupFlags")
    case("BE set (re-signed; BS clear)", signed(flags(data, set_bits=BE)), True)
    case("ED set, no extensions (re-signed)", signed(flags(data, set_bits=ED)), False,
         "passkey_malformed_authenticator_data", "authenticatorData was malformed")
    case("a byte after the authenticator data (re-signed)", signed(data + b"\x00"), False,
         "passkey_malformed_authenticator_data", "authenticatorData was malformed")
    case("sign count equal to the stored one", response, False, "passkey_sign_count_not_increasing", "was not greater than",
         settings={"previous_sign_count": count})
    case("sign count below the stored one", response, False, "passkey_sign_count_not_increasing", "was not greater than",
         settings={"previous_sign_count": count + 5})
    later = entry["later-assertion"]
    later_count = int.from_bytes(authenticator_data_of(later)[33:37], "big")
    case("the authenticator's next assertion, the stored count this one's", later, True, settings={"previous_sign_count": count})
    case("this assertion again after the next one (stored count the next one's)", response, False,
         "passkey_sign_count_not_increasing", "was not greater than", settings={"previous_sign_count": later_count})
    case("sign count 0 (re-signed), stored count not 0", signed(with_count(data, 0)), False,
         "passkey_sign_count_not_increasing", "was not greater than", settings={"previous_sign_count": max(1, registered_count)})
    case("sign count 0 (re-signed), stored count 0 (no counter)", signed(with_count(data, 0)), True,
         settings={"previous_sign_count": 0})
    signature = unb64(response["response"]["signature"])
    case("signature, one bit", with_member(response, ["response", "signature"], b64url(signature[:-1] + bytes([signature[-1] ^ 1]))),
         False, "passkey_signature_invalid", "Could not verify authentication signature")
    other_key = ec.generate_private_key(ec.SECP256R1())
    case("signed by another key", resigned(response, other_key), False, "passkey_signature_invalid",
         "Could not verify authentication signature")
    raw_client_data = client_data(response)
    case("clientDataJSON changed, not re-signed", with_client_data(response, raw=raw_client_data[:-1] + b',"extra":1}'),
         False, "passkey_signature_invalid", "Could not verify authentication signature")
    case("flags changed (UV cleared), not re-signed", with_authenticator_data(response, flags(data, clear_bits=UV)), False,
         "passkey_signature_invalid", "Could not verify authentication signature", settings={"require_uv": False})
    case("id is not rawId", with_member(response, ["id"], b64url(os.urandom(32))), False, "passkey_malformed_response",
         "id and raw_id were not equivalent")
    case("type of the credential not public-key", with_member(response, ["type"], "password"), False,
         "passkey_malformed_response", "type")
    case("userHandle of another user (§7.2 step 6 is the caller's)",
         with_member(response, ["response", "userHandle"], b64url(os.urandom(16))), True)
    other = b64url(os.urandom(32))
    case("id and rawId of another credential (§7.2 step 5 is the caller's)",
         with_member(with_member(response, ["id"], other), ["rawId"], other), True)
    case("crossOrigin true (re-signed)", signed(changed_client_data={"crossOrigin": True}), False,
         "passkey_cross_origin_not_allowed", py_expect=True, difference="cross-origin")
    members = raw_client_data.decode()
    duplicated = members[:-1] + "," + json.dumps("origin") + ":" + json.dumps(origin) + "}"
    duplicated = duplicated.replace(f'"origin":"{origin}"', f'"origin":"{EVIL_ORIGIN}"', 1).encode()
    case("origin twice: another, then the right one (re-signed)", resigned(with_client_data(response, raw=duplicated), key),
         False, "passkey_malformed_client_data", py_expect=True, difference="duplicate-member")
    return cases


# MARK: - Main


def main():
    if len(sys.argv) not in (2, 4) or (len(sys.argv) == 4 and sys.argv[2] != "--table"):
        raise SystemExit(__doc__.split("\n\n")[1])
    binary = sys.argv[1]
    table_path = sys.argv[3] if len(sys.argv) == 4 else None
    check = Checks()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), PageHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    origin = f"http://localhost:{server.server_address[1]}"
    work = tempfile.mkdtemp(prefix="passkey-interop-")

    form = transfer_form("250.00")
    other_form = dict(form, amount="2500.00")
    form_hash = hashlib.sha256(canonical(form)).digest()
    form_path = os.path.join(work, "form.json")
    with open(form_path, "w") as file:
        json.dump(form, file)
    hashed = subprocess.run([binary, "hash", form_path, "--encoding", "base64url"], capture_output=True, text=True, timeout=60)
    check("the challenge is SHA-256 of the form's RFC 8785 bytes, as `formattest hash` computes it",
          hashed.returncode == 0 and hashed.stdout.strip() == b64url(form_hash), f"{hashed.stdout!r} vs {b64url(form_hash)}")

    try:
        recorded = record(origin, form_hash)
    finally:
        server.shutdown()

    # What Chromium made: the shapes the cases rely on.
    def flags_of(response):
        return authenticator_data_of(response)[32]

    uv, no_uv, synced = recorded["uv"], recorded["no-uv"], recorded["synced"]
    check("uv: registration none, UP UV AT, no backup flags",
          parse_cbor(unb64(uv["registration"]["response"]["attestationObject"]))["fmt"] == "none"
          and flags_of(uv["registration"]) & (UP | UV | AT | BE | BS) == UP | UV | AT, hex(flags_of(uv["registration"])))
    check("uv: the direct registration is packed (Chromium's batch certificate)",
          parse_cbor(unb64(uv["registration-packed"]["response"]["attestationObject"]))["fmt"] == "packed")
    check("no-uv: UV off in registration and assertion",
          not flags_of(no_uv["registration"]) & UV and not flags_of(no_uv["assertion"]) & UV)
    check("synced: BE and BS set in registration and assertion",
          flags_of(synced["registration"]) & (BE | BS) == BE | BS and flags_of(synced["assertion"]) & (BE | BS) == BE | BS)
    for name, algorithm in KEY_TYPES.items():
        check(f"{name}: the credential's COSE algorithm is {algorithm}", registered_cose_key(recorded[name]).get(3) == algorithm,
              str(registered_cose_key(recorded[name]).get(3)))
    check("uv: the authenticator's count went up between its two assertions",
          int.from_bytes(authenticator_data_of(uv["later-assertion"])[33:37], "big")
          > int.from_bytes(authenticator_data_of(uv["assertion"])[33:37], "big"))
    check("no-uv: the registration's challenge begins with '-' in base64url",
          b64url(no_uv["registration-challenge"]).startswith("-"))
    check("the assertion's challenge is the form's hash",
          json.loads(client_data(uv["assertion"]))["challenge"] == b64url(form_hash))
    raw = client_data(uv["assertion"])
    check("clientDataJSON re-serialized unchanged is byte-identical (a mutation changes only its member)",
          json.dumps(json.loads(raw), separators=(",", ":")).encode() == raw, raw.decode())
    for name, entry in recorded.items():
        check(f"{name}: the private key read back from the authenticator is the registered credential's "
              "(the re-signing key is the one the browser signed with)", private_key_matches(entry))

    cases = []
    for name, entry in recorded.items():
        settings = {"require_uv": name != "no-uv"}
        cases += registration_cases(name, entry, origin, settings)
    cases += packed_cases(uv, origin)

    # The assertions, with the key each library took from the registration.
    for name, entry in recorded.items():
        registration = Case("registration", name, "key", entry["registration"], expect=True, settings=dict(
            rp_id=RP_ID, origins=[origin], require_uv=False, challenge=entry["registration-challenge"]))
        py_key = verify_registration_response(
            credential=entry["registration"], expected_challenge=entry["registration-challenge"], expected_rp_id=RP_ID,
            expected_origin=origin).credential_public_key
        ft = formattest_verdict(binary, work, registration)
        ft_key = ft_public_key(binary, work, registration)
        check(f"{name}: both libraries took the same COSE key from the registration",
              ft.accepted and parse_cbor(py_key) == parse_cbor(unb64(ft_key)))
        registered_count = int.from_bytes(authenticator_data_of(entry["registration"])[33:37], "big")
        cases += assertion_cases(name, entry, origin, form, other_form, py_key, ft_key, registered_count)

    rows = []
    for number, case in enumerate(cases, 1):
        py = py_verdict(case)
        ft = formattest_verdict(binary, work, case)
        problems = []
        if py.accepted != case.expect_py:
            problems.append(f"py_webauthn {'accepted' if py.accepted else 'refused: ' + py.detail}")
        if ft.accepted != case.expect_ft:
            problems.append(f"formattest {'accepted' if ft.accepted else 'refused'}")
        if not ft.accepted and case.code and ft.detail != case.code:
            problems.append(f"formattest's code is {ft.detail}, not {case.code}")
        if not py.accepted and case.py and case.py not in py.detail:
            problems.append(f"py_webauthn's refusal does not say {case.py!r}: {py.detail}")
        if py.accepted and ft.accepted:
            keys = set(py.report) & set(ft.report)
            differing = sorted(key for key in keys if py.report[key] != ft.report[key])
            if differing:
                problems.append("they report different " + ", ".join(f"{k} ({py.report[k]!r} vs {ft.report[k]!r})" for k in differing))
        agree = py.accepted == ft.accepted
        if case.difference is None and not agree:
            problems.append("they disagree")
        check(f"#{number} {case.ceremony} {case.authenticator}: {case.name}", not problems, "; ".join(problems))
        if agree:
            verdict = "both accept" if py.accepted else "both refuse"
        else:
            verdict = f"differ: {case.difference} (listed)" if case.difference else "DISAGREE"
        rows.append((number, case, py, ft, verdict))

    table = ["| # | ceremony | authenticator | change | py_webauthn 3.0.1 | formattest | verdict |", "|---|---|---|---|---|---|---|"]
    for number, case, py, ft, verdict in rows:
        # A refusal's cell is the words of py_webauthn's message the case checks (its values,
        # such as the port, change from run to run), or its exception's name.
        py_cell = "accept" if py.accepted else "refuse: " + (case.py or py.detail.split(":")[0])
        table.append(f"| {number} | {case.ceremony} | {case.authenticator} | {case.name} | {py_cell} | {ft.cell()} | {verdict} |")
    agreed = sum(1 for row in rows if row[4].startswith("both"))
    table.append("")
    table.append(f"{len(rows)} cases: {agreed} agree, {len(rows) - agreed} differ as listed.")
    for name, text in DIFFERENCES.items():
        table.append(f"- `{name}`: {text}")
    print("\n".join(table))
    if table_path:
        with open(table_path, "w") as file:
            file.write("\n".join(table) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    check.finish()


def registered_cose_key(entry):
    data = authenticator_data_of(entry["registration"])
    length = int.from_bytes(data[53:55], "big")
    return parse_cbor(data[55 + length:])


def private_key_matches(entry):
    """The private key read back from the authenticator is the registered credential's: their
    public keys (SubjectPublicKeyInfo) are the same."""
    key = serialization.load_der_private_key(entry["private-key"], password=None)
    data = authenticator_data_of(entry["registration"])
    length = int.from_bytes(data[53:55], "big")
    registered = decoded_public_key_to_cryptography(decode_credential_public_key(data[55 + length:]))
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return key.public_key().public_bytes(*spki) == registered.public_bytes(*spki)


def ft_public_key(binary, work, case):
    response = os.path.join(work, "registration.json")
    with open(response, "w") as file:
        json.dump(case.response, file)
    run = subprocess.run([binary, "verify", "passkey-registration", "--response", response, "--challenge=" + b64url(case.challenge),
                          "--origin", case.origins[0], "--rp-id", case.rp_id, "--json"], capture_output=True, text=True, timeout=60)
    if run.returncode != 0:
        raise SystemExit(f"formattest refused the registration {case.authenticator}: {run.stdout} {run.stderr}")
    return json.loads(run.stdout)["publicKey"]


if __name__ == "__main__":
    main()
