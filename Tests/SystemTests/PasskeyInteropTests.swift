//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestTestSupport
import Foundation
import Testing

/// Issue 30 item 6: py_webauthn and the built `formattest` on responses made by headless
/// Chromium's WebAuthn virtual authenticator, and on every one-change mutation of them.
struct PasskeyInteropTests {
    @Test(
        "issue 30: py_webauthn and formattest verify passkey-registration/-assertion reach the same verdict on Chromium's virtual authenticator's responses and on each one-change mutation (origin, rp id, type, challenge, UV, UP, BE/BS, sign count, signature, user handle…), the listed differences aside; docs/passkeys.md shows the table"
    )
    func pyWebAuthnAgrees() async throws {
        // Chromium, chromium-driver and the venv are scripts/setup's; without them the test
        // fails, it does not skip (as DemoPageTests).
        let browser = try PythonCheck(venv: ".venv-browser", overrideVariable: "FORMATTEST_BROWSER_PYTHON")
        let files = try TemporaryFiles()
        let tablePath = files.directory.appendingPathComponent("table.md")
        let check = try await browser.run("e2e/interop/passkey_interop.py", [Formattest.executable.path, "--table", tablePath.path])
        #expect(check.status == 0, "\(check.output)")
        #expect(check.output.contains(" passed, 0 failed"), "\(check.output)")
        let table = try String(contentsOf: tablePath, encoding: .utf8)
        let rows = table.split(separator: "\n").filter { $0.hasPrefix("| ") && !$0.hasPrefix("| #") }
        #expect(rows.count >= 80, "\(table)")
        #expect(!table.contains("DISAGREE"), "\(table)")
        // Each mutation the issue names has its rows.
        for change in ["origin", "rp id", "type", "challenge", "UV", "UP", "BE", "BS", "sign count", "signature", "userHandle"] {
            #expect(rows.contains { $0.contains(change) }, "no case changes \(change)")
        }
        // The documented table is the one the script prints (its cells hold no per-run values).
        let documentation = try String(
            contentsOf: repositoryDirectory.appendingPathComponent("docs/passkeys.md"), encoding: .utf8)
        #expect(documentation.contains(table), "docs/passkeys.md does not hold the table e2e/interop/passkey_interop.py prints:\n\(table)")
    }

    @Test(
        "the interop check fails when one side changes one thing: a formattest whose passkey-assertion ignores --require-user-verification is caught on exactly the four assertions refused for UV (ES256 UV cleared, ES256 without UV, EdDSA, RS256)"
    )
    func lenientVerifierIsCaught() async throws {
        let browser = try PythonCheck(venv: ".venv-browser", overrideVariable: "FORMATTEST_BROWSER_PYTHON")
        let files = try TemporaryFiles()
        // The real binary behind a wrapper that drops --require-user-verification from
        // `verify passkey-assertion` (and passes everything else through unchanged).
        let wrapper = files.directory.appendingPathComponent("lenient-formattest")
        let script = """
            #!/bin/sh
            if [ "$1 $2" = "verify passkey-assertion" ]; then
                for argument do shift; [ "$argument" = --require-user-verification ] || set -- "$@" "$argument"; done
            fi
            exec '\(Formattest.executable.path)' "$@"

            """
        try Data(script.utf8).write(to: wrapper)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: wrapper.path)
        let check = try await browser.run("e2e/interop/passkey_interop.py", [wrapper.path])
        #expect(check.status == 1, "\(check.output)")
        let failures = check.output.split(separator: "\n").filter { $0.hasPrefix("FAILED: ") }
        #expect(failures.count == 4, "\(failures)")
        for expected in [
            "assertion uv: UV cleared (re-signed), UV required formattest accepted",
            "assertion no-uv: UV off, UV required formattest accepted",
            "assertion eddsa: UV cleared (re-signed), UV required formattest accepted",
            "assertion rs256: UV cleared (re-signed), UV required formattest accepted",
        ] {
            #expect(failures.contains { $0.contains(expected) }, "no failure \(expected): \(failures)")
        }
        #expect(check.output.contains(" passed, 4 failed"), "\(check.output)")
    }
}
