//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestTestSupport
import Foundation
import Testing

/// The demo page in headless Chromium against a real `formattest serve --dev-simulator`.
struct DemoPageTests {
    @Test(
        "fill the form, sign (attest, then assert), read result and token, replay, change the amount after signing, tell failures apart, recover from an unknown key, 390 px; screenshots saved"
    )
    func demoPage() async throws {
        let browser = try PythonCheck(venv: ".venv-browser", overrideVariable: "FORMATTEST_BROWSER_PYTHON")
        let files = try TemporaryFiles()
        let port = Formattest.freePort()
        let server = try Formattest.start([
            "serve", "--dev-simulator", "--port", String(port),
            "--store", "sqlite:" + files.directory.appendingPathComponent("demo.sqlite").path,
            "--data-dir", files.directory.appendingPathComponent("data").path,
            "--demo-dir", repositoryDirectory.appendingPathComponent("demo").path,
        ])
        defer { _ = server.terminate(within: 10) }
        let artifacts = repositoryDirectory.appendingPathComponent(".build/artifacts")
        try FileManager.default.createDirectory(at: artifacts, withIntermediateDirectories: true)
        let screenshot = artifacts.appendingPathComponent("demo-page.png")
        let narrowScreenshot = artifacts.appendingPathComponent("demo-page-390px.png")
        for file in [screenshot, narrowScreenshot] { try? FileManager.default.removeItem(at: file) }
        let check = try await browser.run("e2e/browser/demo_page_test.py", ["http://127.0.0.1:\(port)", screenshot.path])
        #expect(check.status == 0, "\(check.output)")
        #expect(check.output.contains(" passed, 0 failed"), "\(check.output)")
        #expect(FileManager.default.fileExists(atPath: screenshot.path))
        #expect(FileManager.default.fileExists(atPath: narrowScreenshot.path))
    }

    @Test(
        "issue 30: the demo page's passkeys in headless Chromium with a WebAuthn virtual authenticator: register, a transfer by passkey and device accepted once, replay, passkey_required without it, app_attest_required without the device"
    )
    func passkeyDemoPage() async throws {
        let browser = try PythonCheck(venv: ".venv-browser", overrideVariable: "FORMATTEST_BROWSER_PYTHON")
        let files = try TemporaryFiles()
        let port = Formattest.freePort()
        // WebAuthn's relying party id is the page's host: localhost (an IP address cannot be
        // one), and http://localhost is a secure context.
        let origin = "http://localhost:\(port)"
        let server = try Formattest.start([
            "serve", "--dev-simulator", "--port", String(port),
            "--store", "sqlite:" + files.directory.appendingPathComponent("demo.sqlite").path,
            "--data-dir", files.directory.appendingPathComponent("data").path,
            "--demo-dir", repositoryDirectory.appendingPathComponent("demo").path,
            "--passkey-rp-id", "localhost", "--passkey-origin", origin,
            "--factor-policy", "*=app-attest,transfer=app-attest+passkey-uv",
        ])
        defer { _ = server.terminate(within: 10) }
        let artifacts = repositoryDirectory.appendingPathComponent(".build/artifacts")
        try FileManager.default.createDirectory(at: artifacts, withIntermediateDirectories: true)
        let screenshot = artifacts.appendingPathComponent("demo-page-passkey.png")
        try? FileManager.default.removeItem(at: screenshot)
        let check = try await browser.run("e2e/browser/passkey_demo_test.py", [origin, screenshot.path])
        #expect(check.status == 0, "\(check.output)")
        #expect(check.output.contains(" passed, 0 failed"), "\(check.output)")
        #expect(FileManager.default.fileExists(atPath: screenshot.path))
    }

    @Test("the service shuts down gracefully on SIGTERM")
    func gracefulShutdown() async throws {
        let files = try TemporaryFiles()
        let port = Formattest.freePort()
        let server = try Formattest.start([
            "serve", "--port", String(port), "--store", "memory", "--insecure-no-caller-auth", "--data-dir", files.directory.path,
        ])
        try #require(await Formattest.waitForListener(port: port, process: server.process), "the service did not start listening")
        #expect(server.process.isRunning, "the service did not stay up")
        #expect(await server.terminate(within: 10), "the service did not exit within 10 s of SIGTERM")
        #expect(server.process.terminationReason == .exit)
        #expect(server.process.terminationStatus == 0)
    }
}
