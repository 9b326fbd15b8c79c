//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import ArgumentParser
import FormAttestClient
import FormAttestForm
import FormattestCommands
import Foundation

/// The extension key pool on a shared directory, for scripts and tests: fill it with simulated
/// keys, take keys as an extension would, show its status.
struct Pool: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Work with an app-extension key pool directory (simulated keys).",
        subcommands: [Fill.self, Take.self, Status.self]
    )

    struct Location: ParsableArguments {
        @Option(help: "The shared container directory (the pool lives in its AppAttest/ folder).")
        var container: String

        func pool() throws -> KeyPool {
            try KeyPool(containerDirectory: URL(fileURLWithPath: self.container))
        }
    }

    struct Fill: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Attest COUNT simulated keys over fresh pool challenges and add them to the pool."
        )

        @OptionGroup var location: Location

        @Option(help: "How many keys to add.")
        var count: Int = 10

        @Option(name: .customLong("app-id"), help: "The simulated app's TEAMID.bundleID.")
        var appID = "ABCDE12345.com.formattest.demo"

        func run() async throws {
            let pool = try self.location.pool()
            let device = SimulatedDevice(authority: try SimulatedAttestationAuthority(), appID: self.appID)
            let client = AppAttestClient(
                service: SimulatedAppAttestService(device: device),
                configuration: .init(maximumAttestationsPerWindow: .max)
            )
            for _ in 0..<self.count {
                // A locally made stand-in for a server-issued pool challenge.
                let challenge = Base64URL.encode((0..<32).map { _ in UInt8.random(in: 0...255) })
                let registration = try await client.register(clientDataHash: Data(Base64URL.decode(challenge) ?? []))
                try pool.add(
                    KeyPoolEntry(
                        keyId: registration.keyId,
                        attestation: registration.attestation,
                        challenge: challenge,
                        createdAt: Date()
                    )
                )
            }
            print(try pool.status().available)
        }
    }

    struct Take: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Take keys as an extension does; print each keyId (base64url) on its own line."
        )

        @OptionGroup var location: Location

        @Flag(help: "Take keys until the pool is empty.")
        var all = false

        @Flag(name: .customLong("mark-used"), help: "Mark each taken key used (delete it).")
        var markUsed = false

        func run() throws {
            let pool = try self.location.pool()
            repeat {
                guard let entry = try pool.take() else { break }
                // The entry keeps App Attest's own spelling (standard base64, what the device API
                // takes back); what the CLI prints is base64url, as everywhere.
                print(Base64URL.decode(entry.keyId).map(Base64URL.encode) ?? entry.keyId)
                if self.markUsed { try pool.markUsed(entry) }
            } while self.all
        }
    }

    struct Status: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print the pool's status as JSON.")

        @OptionGroup var location: Location

        func run() throws {
            let status = try self.location.pool().status()
            print(try JSONOutput.string(["available": status.available, "inUse": status.inUse, "targetSize": status.targetSize]))
        }
    }
}
