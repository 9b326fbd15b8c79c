#!/usr/bin/env python3
"""Drives the demo page in headless Chromium (Debian's chromium + chromium-driver, Selenium).

usage: demo_page_test.py BASE_URL SCREENSHOT_PATH

Fills the transfer form, signs on the simulated device (the first signature attests a key, the
second is an assertion), reads the result and the token off the page, replays the same submission
and expects the replay error, and saves a screenshot. Then the issue-20 points:
- after every refusal no earlier success's token, wrapper or server hash stays on screen, and an
  assertion's answer shows no (stale) FIDO2 wrapper;
- after a success the browser's SHA-256 row is the hash of the canonical form shown, the one signed;
- a network failure (the browser offline: fetch throws), a simulator-side refusal (a body over
  64 KiB), a replay and a form changed after signing each say what happened, differently;
- a keyId the simulated device does not hold (what a server restart leaves in the page) shows the
  "Forget key" hint, and pressing it recovers;
- "Sign, then change the amount" is refused by the server (signature_invalid);
- the page says what a signature proves and what it does not, and an amount of -1e400 to an empty
  payee does verify;
- the token's claims appear in one fixed order; at 390 px wide nothing overflows (a second
  screenshot, SCREENSHOT_PATH with "-390px" before its extension);
- on this service without passkey settings, "Register a passkey" is refused with passkeys_disabled
  (the passkey flow itself: passkey_demo_test.py).
Prints "N passed, M failed".
"""
import base64
import hashlib
import json
import os
import secrets
import sys

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select
from selenium.webdriver.support.ui import WebDriverWait

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from formattest_support import Checks, wait_ready  # noqa: E402


def claims_of(token):
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


# The order the page shows a token's claims in (the server writes them in any order).
CLAIM_ORDER = ["iss", "aud", "sub", "iat", "nbf", "exp", "jti", "app_id", "env", "key_id", "cnt", "form_hash", "cnf"]


def b64url(data):
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def check_hashes_agree(driver, check, text, when):
    """The hash rows all describe the canonical form on screen: the browser's SHA-256 of it (not of
    a next form), what the device signed, and what the server computed."""
    canonical = driver.execute_script("return document.getElementById('canonical').textContent")
    digest = b64url(hashlib.sha256(canonical.encode()).digest())
    check(f"{when}: browser SHA-256 is the hash of the canonical form shown", text("hash") == digest, f"{text('hash')} vs {digest}")
    check(f"{when}: browser, signed and server hashes agree", text("hash") == text("submitted-hash") == text("server-hash"),
          f"{text('hash')} / {text('submitted-hash')} / {text('server-hash')}")


def check_nothing_stale(check, text, when):
    """After a refusal no earlier success's token, wrapper or server hash is on screen."""
    stale = {field: text(field)[:60] for field in ("jws-header", "jws-claims", "fido2", "server-hash") if text(field) != "–"}
    check(f"{when}: no earlier token, wrapper or server hash on screen", not stale, str(stale))


def set_field(driver, field, value):
    """Sets an input as typing would (an input event), also for values too long to type."""
    driver.execute_script(
        "const e = document.getElementById(arguments[0]); e.value = arguments[1]; e.dispatchEvent(new Event('input'));",
        field, value)


def issue_20_checks(driver, check, text, screenshot):
    def press(button):
        driver.find_element(By.ID, button).click()
        WebDriverWait(driver, 20).until(lambda d: d.execute_script(
            "return !document.getElementById('sign').disabled && !document.getElementById('tamper').disabled")
            and text("status") not in ("Working…", "") and not text("status").startswith("Signed with amount"))

    # Sign once more so that a token and a wrapper are on screen before each refusal below.
    def fresh_success(label):
        set_field(driver, "amount", "42.00")
        set_field(driver, "to", "Carol Ñandú")
        press("sign")
        check(f"{label}: a success first", text("status").startswith("Verified: counter"), text("status") + " " + text("error"))
        check(f"{label}: its token is on screen", text("jws-claims") != "–")

    statuses = {}

    def tamper():
        # Change the amount after signing: the server refuses, and the page says it is the protection.
        fresh_success("tamper")
        press("tamper")
        sent = json.loads(driver.execute_script("return document.getElementById('canonical').textContent"))
        check("tamper: the form sent carries another amount than the one signed", sent["amount"] == "1000000.00", str(sent))
        check("tamper: the signed hash differs from the sent form's", text("submitted-hash") not in ("–", text("hash")), f"{text('submitted-hash')} vs {text('hash')}")
        check("tamper: the server refuses the changed form (signature_invalid)", text("error").startswith("signature_invalid:"), text("error"))
        check("tamper: the status calls it the protection working",
              "changed after signing" in text("status") and "protection working" in text("status"), text("status"))
        check_nothing_stale(check, text, "tamper")
        statuses["tamper"] = text("status")

    def size():
        # A simulator-side refusal: a payee over 64 KiB makes the device's request too large.
        fresh_success("size")
        set_field(driver, "to", "x" * 70000)
        press("sign")
        check("size: the simulated device refused the request (body_too_large)", text("error").startswith("body_too_large:"), text("error")[:200])
        check("size: the status says the device did not sign and nothing was verified",
              text("status").startswith("The simulated device did not sign"), text("status"))
        check_nothing_stale(check, text, "size")
        statuses["size"] = text("status")

    def network():
        # A network failure: the browser goes offline, so the page's fetch throws (no HTTP answer).
        fresh_success("network")
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
        try:
            press("sign")
        finally:
            driver.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
        check("network: the page reports no answer from the server", text("error").startswith("network_error: POST /api/"), text("error"))
        check("network: the status says the server is stopped or unreachable", text("status").startswith("No answer from the server"), text("status"))
        check_nothing_stale(check, text, "network")
        statuses["network"] = text("status")

    def distinct():
        # The replay's status was checked in main(); repeat one here so the four are compared.
        driver.find_element(By.ID, "replay").click()
        WebDriverWait(driver, 20).until(lambda d: d.find_element(By.ID, "error").is_displayed())
        statuses["replay"] = text("status")
        check("four failures, four different statuses, none a bare \"Rejected.\"",
              len(set(statuses.values())) == 4 and "Rejected." not in statuses.values(), str(statuses))

    def restart():
        # What a server restart leaves: the page remembers a keyId the simulated device no longer holds.
        fresh_success("restart")
        driver.execute_script("sessionStorage.setItem('formattest.keyId', arguments[0])", b64url(secrets.token_bytes(32)))
        press("sign")
        check("restart: the device names the unknown key (simulator_unknown_key)", text("error").startswith("simulator_unknown_key:"), text("error"))
        check("restart: the page says to press Forget key", 'Press "Forget key"' in text("hint"), text("hint"))
        check_nothing_stale(check, text, "restart")
        driver.find_element(By.ID, "reset").click()
        press("sign")
        check("restart: after Forget key the next signature attests a new key", text("status") == "Verified: counter 0.", text("status") + " " + text("error"))
        check("restart: the hint is gone after the success", not driver.find_element(By.ID, "hint").is_displayed())

    def proves():
        # What a signature proves and what it does not; the page's example does verify.
        said = " ".join(text("proves").split())
        check("the page says what a signature proves", "origin and integrity of these exact bytes, once" in said, said)
        check("the page says what it does not prove", "It does not prove business validity" in said and "-1e400 to an empty payee verifies" in said, said)
        set_field(driver, "amount", "-1e400")
        set_field(driver, "to", "")
        press("sign")
        signed = json.loads(driver.execute_script("return document.getElementById('canonical').textContent"))
        check("an amount of -1e400 to an empty payee verifies, as the page says",
              text("status").startswith("Verified: counter") and signed["amount"] == "-1e400" and signed["to"] == "", text("status") + " " + str(signed))
        check_hashes_agree(driver, check, text, "-1e400")

    def passkeys_off():
        # This service has no passkey settings: a passkey registration is refused before any ceremony.
        press("passkey-register")
        check("passkeys off: the registration is refused with passkeys_disabled", text("error").startswith("passkeys_disabled:"), text("error"))
        check("passkeys off: the status says how to turn them on", text("status").startswith("This service accepts no passkeys"), text("status"))

    def narrow():
        # 390 px wide: nothing overflows.
        driver.set_window_size(390, 1500)
        WebDriverWait(driver, 10).until(lambda d: d.execute_script("return window.innerWidth") <= 390)
        width = driver.execute_script("return window.innerWidth")
        scroll = driver.execute_script("return document.documentElement.scrollWidth")
        check("390 px: the window is 390 px wide", width == 390, str(width))
        check("390 px: nothing wider than the window", scroll <= 390, f"scrollWidth {scroll}")
        stem, extension = os.path.splitext(screenshot)
        driver.save_screenshot(stem + "-390px" + extension)

    # Each phase runs even when an earlier one broke off: an exception is a failure, not a crash.
    for phase in (tamper, size, network, distinct, restart, proves, passkeys_off, narrow):
        try:
            phase()
        except Exception as error:  # noqa: BLE001 - reported as a failure with its message
            check(f"{phase.__name__}: ran to its end", False, f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")


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

    def wait_for_status(count):
        WebDriverWait(driver, 20).until(lambda d: text("status") != "Nothing submitted yet." and text("sign") and d.execute_script("return !document.getElementById('sign').disabled"))

    try:
        driver.get(base + "/appattest-demo.html")
        WebDriverWait(driver, 10).until(lambda d: len(text("hash")) == 43)
        check("the page says it runs without caller authentication", "no caller authentication" in text("demo-mode"), text("demo-mode"))
        for field, value in (("amount", "42.00"), ("to", "Carol Ñandú")):
            element = driver.find_element(By.ID, field)
            element.clear()
            element.send_keys(value)
        canonical = json.loads(text("canonical"))
        check("canonical form follows the inputs", canonical["amount"] == "42.00" and canonical["to"] == "Carol Ñandú", text("canonical"))
        check("canonical members sorted", list(canonical) == sorted(canonical), text("canonical"))

        # First signature: a new key is attested.
        driver.find_element(By.ID, "sign").click()
        wait_for_status(1)
        check("attestation verified", text("status") == "Verified: counter 0.", text("status") + " " + text("error"))
        check("browser and server hashes agree", text("submitted-hash") == text("server-hash"), f"{text('submitted-hash')} vs {text('server-hash')}")
        claims = json.loads(text("jws-claims"))
        check("token subject is the user", claims.get("sub") == "alice", str(claims))
        check("token counter 0", claims.get("cnt") == 0, str(claims))
        check("token form hash is the signed form's", claims.get("form_hash") == text("server-hash"), str(claims))
        check("the claims are shown in the fixed order", list(claims) == [k for k in CLAIM_ORDER if k in claims] + sorted(k for k in claims if k not in CLAIM_ORDER), str(list(claims)))
        check_hashes_agree(driver, check, text, "after the attestation")
        check("JWS header names ES256", json.loads(text("jws-header")).get("alg") == "ES256")
        check("FIDO2 wrapper shown", json.loads(text("fido2")).get("type") == "wrapped-attestation")
        check("inspector names the attestation object", text("inspect").startswith("attestation object:"), text("inspect")[:200])
        check("inspector decodes the receipt", 'field 6 receipt type: "ATTEST"' in text("inspect"), text("inspect")[:200])
        Select(driver.find_element(By.ID, "inspect-mode")).select_by_value("tree")
        WebDriverWait(driver, 10).until(lambda d: text("inspect").lstrip().startswith("0 hl=1"))
        check("tree view lists CBOR and ASN.1 items", "map(3)" in text("inspect") and "OBJECT IDENTIFIER" in text("inspect"), text("inspect")[:200])
        Select(driver.find_element(By.ID, "inspect-mode")).select_by_value("semantic")

        # Second signature: an assertion with the registered key.
        driver.find_element(By.ID, "sign").click()
        WebDriverWait(driver, 20).until(lambda d: text("status").startswith("Verified: counter 1"))
        result = json.loads(text("result"))
        check("assertion verified", result.get("counter") == 1, text("result"))
        token_claims = claims_of(result["formats"]["serverAttestation"])
        check("assertion token counter 1", token_claims.get("cnt") == 1, str(token_claims))

        check("the claims keep their order from token to token", list(json.loads(text("jws-claims"))) == list(claims), f"{list(json.loads(text('jws-claims')))} vs {list(claims)}")
        check("an assertion shows no stale FIDO2 wrapper (no counter-0 wrapper from the attestation)",
              "wrapped-attestation" not in text("fido2") and "none for an assertion" in text("fido2"), text("fido2")[:200])
        check_hashes_agree(driver, check, text, "after the assertion")

        # Replay the same submission: refused, shown plainly as the protection working.
        driver.find_element(By.ID, "replay").click()
        WebDriverWait(driver, 20).until(lambda d: d.find_element(By.ID, "error").is_displayed())
        check("replay refused", text("error").startswith("replay:"), text("error"))
        check("status says it was refused as a replay, the protection working",
              text("status").startswith("Refused as a replay") and "protection working" in text("status"), text("status"))
        check_nothing_stale(check, text, "after the replay")

        # An iOS 27 device: its signals are in the answer and in the inspector.
        Select(driver.find_element(By.ID, "device")).select_by_value("ios27-testflight")
        driver.find_element(By.ID, "reset").click()
        driver.find_element(By.ID, "sign").click()
        WebDriverWait(driver, 20).until(lambda d: text("status") == "Verified: counter 0.")
        signals = json.loads(text("result")).get("extensions", {})
        check("iOS 27 signals in the answer", signals.get("validationCategory") == {"value": 2, "name": "testflight"} and signals.get("bundleVersion") == "2.0", text("result"))
        check("inspector shows the category", "validation category 2 (testflight)" in text("inspect"), text("inspect")[:400])
        driver.save_screenshot(screenshot)
        issue_20_checks(driver, check, text, screenshot)
    finally:
        driver.quit()
    check.finish()


if __name__ == "__main__":
    main()
