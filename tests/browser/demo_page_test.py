#!/usr/bin/env python3
"""Drives the demo page in headless Chromium (Debian's chromium + chromium-driver, Selenium).

usage: demo_page_test.py BASE_URL SCREENSHOT_PATH

Fills the transfer form, signs on the simulated device (the first signature attests a key, the
second is an assertion), reads the result and the token off the page, replays the same submission
and expects the replay error, and saves a screenshot. Prints "N passed, M failed".
"""
import base64
import json
import sys
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select
from selenium.webdriver.support.ui import WebDriverWait


def claims_of(token):
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def wait_until_ready(base, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"the service at {base} did not become ready")


def main():
    base, screenshot = sys.argv[1], sys.argv[2]
    wait_until_ready(base)
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1500"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    passed, failures = 0, []

    def check(name, condition, detail=""):
        nonlocal passed
        if condition:
            passed += 1
        else:
            failures.append(f"{name} {detail}")

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

        # Replay the same submission: refused, shown plainly.
        driver.find_element(By.ID, "replay").click()
        WebDriverWait(driver, 20).until(lambda d: d.find_element(By.ID, "error").is_displayed())
        check("replay refused", text("error").startswith("replay:"), text("error"))
        check("status says rejected", text("status") == "Rejected.", text("status"))

        # An iOS 27 device: its signals are in the answer and in the inspector.
        Select(driver.find_element(By.ID, "device")).select_by_value("ios27-testflight")
        driver.find_element(By.ID, "reset").click()
        driver.find_element(By.ID, "sign").click()
        WebDriverWait(driver, 20).until(lambda d: text("status") == "Verified: counter 0.")
        signals = json.loads(text("result")).get("extensions", {})
        check("iOS 27 signals in the answer", signals.get("validationCategory") == {"value": 2, "name": "testflight"} and signals.get("bundleVersion") == "2.0", text("result"))
        check("inspector shows the category", "validation category 2 (testflight)" in text("inspect"), text("inspect")[:400])
        driver.save_screenshot(screenshot)
    finally:
        driver.quit()
    for failure in failures:
        print("FAILED:", failure)
    print(f"{passed} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
