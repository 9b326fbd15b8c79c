"""`formattest serve` applies the iOS 27 signal policy it was started with, from flags and from
FORMATTEST_* variables alike, to attestations and to assertions.

Usage: serve_signal_policy.py BASE_URL

The service runs with --dev-simulator, --minimum-bundle-version 2.0 (a flag),
FORMATTEST_VALIDATION_CATEGORIES=app-store and FORMATTEST_REQUIRE_EXTENSIONS=true (variables).
The simulated device sends each shape through POST /api/dev/simulate's `device`. Standard library
only. Prints `N passed, M failed` last and exits non-zero on any failure.
"""

import datetime
import json
import sys
import urllib.error
import urllib.request
import uuid


def post(base, path, body):
    request = urllib.request.Request(
        base + path, data=json.dumps(body).encode(), headers={"content-type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def form():
    """A fresh transfer, stamped with the real clock (the service checks its time window)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"
    return {"action": "transfer", "amount": "1.00", "to": "bob", "username": "alice", "timestamp": stamp, "nonce": str(uuid.uuid4())}


def device(**changes):
    shape = {"os": "ios27", "validationCategory": "app-store", "bundleVersion": "2.0", "spelling": "apple"}
    shape.update(changes)
    return shape


def main():
    base = sys.argv[1]
    passed, failures = 0, []

    def check(name, condition, detail=""):
        nonlocal passed
        if condition:
            passed += 1
        else:
            failures.append(f"{name} {detail}")

    def attest(shape):
        body = form()
        status, simulated = post(base, "/api/dev/simulate", {"action": "attest", "form": body, "device": shape})
        if status != 200:
            return status, simulated, None
        status, answer = post(base, "/api/appattest/attest", {
            "username": "alice", "keyId": simulated["keyId"], "attestationObject": simulated["attestationObject"], "form": body,
        })
        return status, answer, simulated["keyId"]

    def assert_(key_id, shape):
        body = form()
        _, simulated = post(base, "/api/dev/simulate", {"action": "assert", "keyId": key_id, "form": body, "device": shape})
        return post(base, "/api/appattest/assert", {"username": "alice", "keyId": key_id, "assertion": simulated["assertion"], "form": body})

    status, answer, key_id = attest(device())
    check("an App Store 2.0 attestation is accepted", status == 200, f"{status} {answer}")
    check("its signals are in the answer", answer.get("extensions", {}).get("validationCategory") == {"value": 4, "name": "app-store"}, str(answer))
    for name, shape, code in [
        ("a TestFlight attestation (FORMATTEST_VALIDATION_CATEGORIES)", device(validationCategory="testflight"), "validation_category_not_allowed"),
        ("a 1.9 attestation (--minimum-bundle-version)", device(bundleVersion="1.9"), "bundle_version_too_old"),
        ("an attestation without the map (FORMATTEST_REQUIRE_EXTENSIONS)", {"os": "ios26"}, "extensions_required"),
    ]:
        status, answer, _ = attest(shape)
        check(f"{name} is refused", status == 401 and answer.get("error", {}).get("code") == code, f"{status} {answer}")

    if key_id:
        for flags in (0x40, 0x00):
            status, answer = assert_(key_id, device(bundleVersion="2.1", spelling="documentation", assertionFlags=flags))
            check(f"an App Store 2.1 assertion (flags {flags:#04x}) is accepted", status == 200, f"{status} {answer}")
            for name, shape, code in [
                ("a TestFlight assertion", device(validationCategory="testflight", assertionFlags=flags), "validation_category_not_allowed"),
                ("a 1.0 assertion", device(bundleVersion="1.0", assertionFlags=flags), "bundle_version_too_old"),
                ("an assertion without the map", device(assertionMap=False, assertionFlags=flags), "extensions_required"),
            ]:
                status, answer = assert_(key_id, shape)
                check(f"{name} (flags {flags:#04x}) is refused", status == 401 and answer.get("error", {}).get("code") == code, f"{status} {answer}")

    for failure in failures:
        print("FAILED:", failure)
    print(f"{passed} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
