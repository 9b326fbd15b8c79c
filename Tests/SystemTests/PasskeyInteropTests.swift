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
}
