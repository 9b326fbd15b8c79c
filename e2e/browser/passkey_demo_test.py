#!/usr/bin/env python3
"""Drives the demo page's passkey flow in headless Chromium with a WebAuthn virtual authenticator
(Debian's chromium + chromium-driver, Selenium 4.38): Chromium's own WebAuthn implementation is the
client.

usage: passkey_demo_test.py BASE_URL SCREENSHOT_PATH

BASE_URL must be the origin the service was started with as --passkey-origin, on the host that is
its --passkey-rp-id (http://localhost:PORT with --passkey-rp-id localhost: WebAuthn treats
http://localhost as a secure context, and an IP address cannot be a relying party id). The service
runs with --dev-simulator and the factor policy `*=app-attest,transfer=app-attest+passkey-uv`.

The virtual authenticator is CTAP2 over the internal transport (a platform authenticator), with
resident keys and user verification, the user verified. Through the page:
- the simulated device's key is registered over a standing order (App Attest alone suffices there);
- a transfer signed by the device alone is refused with passkey_required;
- a passkey is registered for the signed-in user (navigator.credentials.create with the service's
  options); the authenticator holds it, for the service's relying party id;
- a transfer signed by the passkey and the device is accepted, both factors named, the passkey's
  challenge being the form's clientDataHash (the same 32 bytes the device signed);
- the same submission again is refused as a replay; a new transfer is accepted;
- with the user not verified the passkey's transfer is not accepted;
- a transfer signed by the passkey alone is refused with app_attest_required.
Prints "N passed, M failed".
"""
import base64
import json
import os
import sys

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.virtual_authenticator import Credential, VirtualAuthenticatorOptions
from selenium.webdriver.support.ui import Select
from selenium.webdriver.support.ui import WebDriverWait

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from formattest_support import Checks, wait_ready  # noqa: E402


def claims_of(token):
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def unpadded(text):
    return text.rstrip("=")


def authenticator(user_verification):
    """A platform authenticator (CTAP2, internal transport) with resident keys; with
    `user_verification`, it verifies the user (a PIN or biometric that always succeeds)."""
    return VirtualAuthenticatorOptions(
        protocol=VirtualAuthenticatorOptions.Protocol.CTAP2,
        transport=VirtualAuthenticatorOptions.Transport.INTERNAL,
        has_resident_key=True, has_user_verification=user_verification, is_user_verified=user_verification)


def move_credentials(driver, user_verification):
    """The same passkeys (their private keys and sign counts) in a new authenticator that does or
    does not verify the user: Chromium's authenticator that can verify always does when asked."""
    credentials = driver.get_credentials()
    driver.remove_virtual_authenticator()
    driver.add_virtual_authenticator(authenticator(user_verification))
    for credential in credentials:
        driver.add_credential(Credential.create_resident_credential(
            base64.urlsafe_b64decode(credential.id), credential.rp_id, base64.urlsafe_b64decode(credential.user_handle),
            base64.urlsafe_b64decode(credential.private_key), credential.sign_count))
    return len(driver.get_credentials())


def main():
    base, screenshot = sys.argv[1], sys.argv[2]
    if not wait_ready(base, statuses=(200,)):
        raise SystemExit(f"the service at {base} did not become ready")
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1500"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    check = Checks()

    def text(element_id):
        return driver.find_element(By.ID, element_id).text

    def press(button):
        """Presses a button and waits until the page is done (its buttons enabled again, a status)."""
        driver.find_element(By.ID, button).click()
        WebDriverWait(driver, 60).until(lambda d: d.execute_script(
            "return ['sign', 'tamper', 'passkey-register', 'passkey-sign'].every(id => !document.getElementById(id).disabled)")
            and text("status") not in ("Working…", ""))

    def action(value):
        Select(driver.find_element(By.ID, "action")).select_by_value(value)

    try:
        driver.add_virtual_authenticator(authenticator(user_verification=True))
        driver.get(base + "/appattest-demo.html")
        WebDriverWait(driver, 10).until(lambda d: len(text("hash")) == 43)
        check("the page is at the passkey origin", driver.execute_script("return location.origin") == base,
              driver.execute_script("return location.origin"))
        check("the page is a secure context (WebAuthn is available)", driver.execute_script("return window.isSecureContext && !!window.PublicKeyCredential"))
        check("no passkey yet", text("passkey-state").startswith("No passkey registered"), text("passkey-state"))

        # The device's key, over a standing order: App Attest alone is what that form needs.
        action("standing-order")
        press("sign")
        check("the device's key is registered over a standing order", text("status") == "Verified: counter 0.", text("status") + " " + text("error"))

        # A transfer signed by the device alone: the factor policy needs a passkey.
        action("transfer")
        press("sign")
        check("a transfer signed by the device alone is refused with passkey_required",
              text("error").startswith("passkey_required:"), text("error"))
        check("the status says the form needs a passkey", text("status").startswith("Refused: this form needs a passkey"), text("status"))
        check("no token on screen after the refusal", text("jws-claims") == "–" and text("server-hash") == "–", text("jws-claims")[:80])

        # The passkey's registration: the service's options, navigator.credentials.create, the registration.
        press("passkey-register")
        check("the passkey is registered", text("status") == "Passkey registered for alice: none attestation, user verified.",
              text("status") + " " + text("error"))
        registered = json.loads(text("result"))
        check("the registration's answer: verified, format none, UV, the internal transport",
              registered.get("verified") is True and registered.get("format") == "none" and registered.get("userVerified") is True
              and "internal" in registered.get("transports", []), text("result"))
        credentials = driver.get_credentials()
        check("the authenticator holds one credential, resident, for rp id localhost",
              len(credentials) == 1 and credentials[0].is_resident_credential and credentials[0].rp_id == "localhost",
              str([(c.rp_id, c.is_resident_credential) for c in credentials]))
        check("it is the credential the service registered",
              len(credentials) == 1 and unpadded(credentials[0].id) == registered.get("credentialId"),
              f"{[c.id for c in credentials]} vs {registered.get('credentialId')}")
        check("the page names the registered passkey", text("passkey-state").startswith("Passkey ") and "registered for alice" in text("passkey-state"),
              text("passkey-state"))

        # A transfer signed by the passkey and the device: accepted, both factors named.
        press("passkey-sign")
        check("a transfer signed by the passkey and the device is accepted",
              text("status").startswith("Verified by app-attest + passkey: App Attest counter ") and "user verified" in text("status"),
              text("status") + " " + text("error"))
        result = json.loads(text("result")) if text("result").startswith("{") else {}
        check("the answer names both factors", result.get("factors") == ["app-attest", "passkey"], text("result"))
        passkey = result.get("passkey", {})
        check("the answer's passkey: the registered credential, user verified",
              passkey.get("credentialId") == registered.get("credentialId") and passkey.get("userVerified") is True, str(passkey))
        check("the passkey signed the form's clientDataHash: challenge = device's hash = server's formHash = browser SHA-256",
              text("passkey-challenge") == text("submitted-hash") == text("server-hash") == text("hash") and len(text("hash")) == 43,
              f"{text('passkey-challenge')} / {text('submitted-hash')} / {text('server-hash')} / {text('hash')}")
        credentials = driver.get_credentials()
        check("the service stored the authenticator's sign count",
              len(credentials) == 1 and passkey.get("signCount") == credentials[0].sign_count,
              f"{passkey.get('signCount')} vs {[c.sign_count for c in credentials]}")
        token = result.get("formats", {}).get("serverAttestation", "")
        amr = claims_of(token).get("amr", []) if token else []
        check("the server-signed JWS's amr: the device's key, the person present and verified", {"hwk", "user", "mfa"} <= set(amr), str(amr))
        driver.save_screenshot(screenshot)

        # The same submission again: a replay, whichever signatures it carries.
        press("replay")
        check("the same submission again is refused as a replay", text("error").startswith("replay:"), text("error"))
        check("the status says replay, the protection working", text("status").startswith("Refused as a replay"), text("status"))

        # A new transfer with both factors: accepted (the replay record is per form).
        press("passkey-sign")
        check("a new transfer signed by both is accepted", text("status").startswith("Verified by app-attest + passkey"), text("status") + " " + text("error"))

        # User verification fails on the authenticator: Chromium refuses the ceremony, nothing is sent.
        driver.set_user_verified(False)
        press("passkey-sign")
        check("user verification failing: the browser's ceremony ends with NotAllowedError, nothing sent",
              text("error").startswith("webauthn_NotAllowedError:") and text("status").startswith("The browser's passkey ceremony did not complete"),
              text("status") + " " + text("error"))
        driver.set_user_verified(True)

        # The same passkey on an authenticator without user verification: it signs with UV off
        # (userVerification "preferred"), and the service refuses the transfer (passkey-uv).
        check("the passkey moved to an authenticator without user verification", move_credentials(driver, user_verification=False) == 1)
        press("passkey-sign")
        check("a transfer signed without user verification is refused with user_verification_required",
              text("error").startswith("user_verification_required:") and text("status").startswith("Refused: this form needs a passkey with user verification"),
              text("status") + " " + text("error"))

        # The passkey alone (the page forgets the device's key): the transfer needs App Attest too.
        driver.find_element(By.ID, "reset").click()
        press("passkey-sign")
        check("a transfer signed by the passkey alone is refused with app_attest_required",
              text("error").startswith("app_attest_required:"), text("status") + " " + text("error"))
    finally:
        driver.quit()
    check.finish()


if __name__ == "__main__":
    main()
