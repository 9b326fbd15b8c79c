//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Foundation
import FormAttestTestSupport
import Testing

/// The demo page in headless Chromium against a real `formattest serve --dev-simulator`.
struct DemoPageTests {
    static let repository = RealSample.fixturesDirectory.deletingLastPathComponent().deletingLastPathComponent()

    @Test("fill the form, sign (attest, then assert), read result and token, replay and see the error; screenshot saved")
    func demoPage() throws {
        let python = ProcessInfo.processInfo.environment["FORMATTEST_BROWSER_PYTHON"]
            ?? Self.repository.appendingPathComponent(".venv-browser/bin/python").path
        try #require(FileManager.default.isExecutableFile(atPath: python), "run scripts/setup (chromium, chromium-driver, .venv-browser)")
        let files = try TemporaryFiles()
        let port = Int.random(in: 20_000...60_000)
        let server = try Formattest.start([
            "serve", "--dev-simulator", "--port", String(port),
            "--store", "sqlite:" + files.directory.appendingPathComponent("demo.sqlite").path,
            "--data-dir", files.directory.appendingPathComponent("data").path,
            "--demo-dir", Self.repository.appendingPathComponent("demo").path,
        ])
        defer { _ = server.terminate(within: 10) }
        let artifacts = Self.repository.appendingPathComponent(".build/artifacts")
        try FileManager.default.createDirectory(at: artifacts, withIntermediateDirectories: true)
        let screenshot = artifacts.appendingPathComponent("demo-page.png")
        try? FileManager.default.removeItem(at: screenshot)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = [Self.repository.appendingPathComponent("tests/browser/demo_page_test.py").path, "http://127.0.0.1:\(port)", screenshot.path]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "\(output)")
        #expect(output.contains(" passed, 0 failed"), "\(output)")
        #expect(FileManager.default.fileExists(atPath: screenshot.path))
    }

    @Test("the service shuts down gracefully on SIGTERM")
    func gracefulShutdown() throws {
        let files = try TemporaryFiles()
        let port = Int.random(in: 20_000...60_000)
        let server = try Formattest.start(["serve", "--port", String(port), "--store", "memory", "--data-dir", files.directory.path])
        Thread.sleep(forTimeInterval: 1.5)
        #expect(server.process.isRunning, "the service did not stay up")
        #expect(server.terminate(within: 10), "the service did not exit within 10 s of SIGTERM")
        #expect(server.process.terminationReason == .exit)
        #expect(server.process.terminationStatus == 0)
    }
}
