"""`formattest serve` applies the iOS 27 signal policy it was started with, from flags and from
FORMATTEST_* variables alike, to attestations and to assertions.

Usage: serve_signal_policy.py BASE_URL

The service runs with --dev-simulator, --minimum-bundle-version 2.0 (a flag),
FORMATTEST_VALIDATION_CATEGORIES=app-store and FORMATTEST_REQUIRE_EXTENSIONS=true (variables).
The simulated device sends each shape through POST /api/dev/simulate's `device`. Standard library
only. Prints `N passed, M failed` last and exits non-zero on any failure.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from formattest_support import Checks, post_json as post, transfer_form as form  # noqa: E402


def device(**changes):
    shape = {"os": "ios27", "validationCategory": "app-store", "bundleVersion": "2.0", "spelling": "apple"}
    shape.update(changes)
    return shape


def main():
    base = sys.argv[1]
    check = Checks()

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

    check.finish()


if __name__ == "__main__":
    main()
