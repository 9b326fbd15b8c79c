//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestTestSupport
import Foundation
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The product's binary (`formattest`) contains no simulator: the developer tools and
/// `serve --dev-simulator` are `formattest-dev`'s, and the product refuses them.
struct DeveloperExecutableTests {
    /// The simulator root's subject name: in the binary that can mint attestations, and only there.
    static let simulatorRootName = Data("FormAttest Simulated App Attestation Root CA".utf8)

    @Test("the product binary does not contain the simulator's CA; the developer binary does")
    func productHasNoSimulator() throws {
        let product = try Data(contentsOf: Formattest.executable, options: .alwaysMapped)
        let developer = try Data(contentsOf: Formattest.developerExecutable, options: .alwaysMapped)
        #expect(product.range(of: Self.simulatorRootName) == nil)
        #expect(developer.range(of: Self.simulatorRootName) != nil)
    }

    @Test("the developer commands are unknown to formattest (exit 2)", arguments: [["bench"], ["simulate", "root"], ["pool", "status"]])
    func developerCommandsAreNotInTheProduct(_ arguments: [String]) async throws {
        let refused = try await Formattest.start(arguments, stdin: nil, keepStdinOpen: false, executable: Formattest.executable).finish()
        #expect(refused.status == 2, "\(refused.stderr)")
        #expect(refused.stderr.lowercased().contains("unexpected argument"), "\(refused.stderr)")
        #expect(refused.stderr.contains("'\(arguments[0])'"), "\(refused.stderr)")
        #expect(refused.stdout.isEmpty)
    }

    @Test("formattest-dev simulate root prints the simulator's root (the same command, the developer binary)")
    func developerBinaryRunsThem() async throws {
        let result = try await Formattest.run(["simulate", "root"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.hasPrefix("-----BEGIN CERTIFICATE-----"))
    }

    @Test("formattest serve refuses --dev-simulator (flag or environment) before it listens, naming formattest-dev")
    func productRefusesDevSimulator() async throws {
        let files = try TemporaryFiles()
        let port = Formattest.freePort()
        let base = ["serve", "--store", "memory", "--port", String(port), "--data-dir", files.directory.appendingPathComponent("data").path]
        let flag = try await Formattest.start(base + ["--dev-simulator"], stdin: nil, keepStdinOpen: false, executable: Formattest.executable)
            .finish()
        #expect(flag.status == 2)
        #expect(flag.stderr.contains("--dev-simulator (command line): this binary contains no simulator"), "\(flag.stderr)")
        #expect(flag.stderr.contains("formattest-dev serve --dev-simulator"), "\(flag.stderr)")
        let environment = try await Formattest.start(
            base, stdin: nil, keepStdinOpen: false, environment: ["FORMATTEST_DEV_SIMULATOR": "true"], executable: Formattest.executable
        ).finish()
        #expect(environment.status == 2)
        #expect(environment.stderr.contains("--dev-simulator (environment): this binary contains no simulator"), "\(environment.stderr)")
        // Refused before anything was created.
        #expect(!FileManager.default.fileExists(atPath: files.directory.appendingPathComponent("data").path))
    }

    @Test("formattest-dev serve --dev-simulator serves the simulated device")
    func developerServeHasTheSimulator() async throws {
        let files = try TemporaryFiles()
        let port = Formattest.freePort()
        let server = try Formattest.start(
            ["serve", "--dev-simulator", "--store", "memory", "--port", String(port), "--data-dir", files.directory.path, "--log-level", "warning"]
        )
        defer { _ = server.terminate(within: 10) }
        try #require(await Formattest.waitForListener(port: port, process: server.process))
        #expect(server.process.executableURL == Formattest.developerExecutable)
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/api/dev/simulate")!)
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data(#"{"action":"attest","poolChallenge":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}"#.utf8)
        let (data, response) = try await URLSession.shared.data(for: request)
        #expect((response as? HTTPURLResponse)?.statusCode == 200, "\(String(decoding: data, as: UTF8.self))")
        let answer = try JSONSerialization.jsonObject(with: data) as? [String: Any]
        #expect(answer?["attestationObject"] is String)
    }
}
