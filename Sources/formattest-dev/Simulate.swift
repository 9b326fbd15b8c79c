//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import ArgumentParser
import CanonicalJSON
import FormAttestForm
import FormattestCommands
import FormAttestFlows
import Foundation
import RFC3339
import SwiftASN1

/// Runs the real flows against a real store with a simulated device, from a separate process:
/// how the tests show that several verifier instances share one store correctly.
///
/// The device derives its keys from `--seed`, so every process signs with the same key; the CA
/// is the simulator's (trusted here only). Never a production path: nothing here is Apple's.
struct Simulate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a flow with a simulated device against a store (development and tests only).",
        subcommands: [Register.self, Assert.self, PrepareLoad.self, Root.self]
    )

    struct Device: ParsableArguments {
        @Option(help: "The simulated device's seed (the same seed gives the same keys).")
        var seed: UInt64 = 1

        @Option(name: .customLong("key-index"), help: "Which of the device's keys.")
        var keyIndex = 0

        @Option(help: "The user who signs.")
        var username = "alice"

        @Option(name: .customLong("app-id"))
        var appID = "ABCDE12345.com.formattest.demo"

        @Option(help: "The form's nonce: the same nonce and timestamp give the same form.")
        var nonce: String = UUID().uuidString

        @Option(help: "The form's timestamp (RFC 3339 UTC); default now.")
        var timestamp: String?

        @Option(help: "The transfer amount.")
        var amount = "10.00"

        func flows(store: any AttestationStore) throws -> (FormFlows, SimulatedDevice) {
            let authority = try SimulatedAttestationAuthority()
            let device = SimulatedDevice(authority: authority, appID: self.appID, seed: self.seed)
            let verifier = try AppAttestVerifier(policy: authority.policy(appIDs: [self.appID]))
            return (FormFlows(verifier: verifier, store: store), device)
        }

        func form() throws -> [UInt8] {
            let stamp = try self.timestamp.map { text -> String in
                guard RFC3339UTC.parse(text) != nil else { throw UsageError("--timestamp must be RFC 3339 UTC") }
                return text
            } ?? RFC3339UTC.format(Date())
            return DemoTransferForm.bytes(username: self.username, amount: self.amount, timestamp: stamp, nonce: self.nonce)
        }
    }

    /// The JSON each subcommand prints.
    struct Outcome: Encodable {
        var accepted: Bool
        var counter: UInt32?
        var code: String?
        var message: String?
    }

    static func finish(_ outcome: Outcome) throws {
        print(try JSONOutput.string(outcome))
        if !outcome.accepted { throw ExitCode(1) }
    }

    struct Register: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Attest the device's key while signing a form.")
        @OptionGroup var device: Device
        @OptionGroup var storeOptions: StoreOptions

        func run() async throws {
            let (flows, simulated) = try self.device.flows(store: try await self.storeOptions.open())
            let key = simulated.key(self.device.keyIndex)
            let form = try self.device.form()
            let hash = try SignedForm(jsonBytes: form).clientDataHash
            let request = FormFlows.AttestRequest(
                username: self.device.username,
                keyID: key.keyID,
                attestationObject: try simulated.attest(key, clientDataHash: hash, at: Date()),
                form: form
            )
            let outcome: Outcome
            do {
                outcome = Outcome(accepted: true, counter: try await flows.attest(request, now: Date()).counter)
            } catch {
                outcome = Outcome(accepted: false, code: error.code.identifier, message: error.reason)
            }
            try Simulate.finish(outcome)
        }
    }

    struct Assert: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Sign a form with the device's registered key.")
        @OptionGroup var device: Device
        @OptionGroup var storeOptions: StoreOptions

        @Option(help: "The counter the device signs.")
        var counter: UInt32

        func run() async throws {
            let (flows, simulated) = try self.device.flows(store: try await self.storeOptions.open())
            let key = simulated.key(self.device.keyIndex)
            let form = try self.device.form()
            let request = FormFlows.AssertRequest(
                username: self.device.username,
                keyID: key.keyID,
                assertion: try simulated.assert(key, clientDataHash: try SignedForm(jsonBytes: form).clientDataHash, counter: self.counter),
                form: form
            )
            let outcome: Outcome
            do {
                outcome = Outcome(accepted: true, counter: try await flows.assert(request, now: Date()).assertion.counter)
            } catch {
                outcome = Outcome(accepted: false, code: error.code.identifier, message: error.reason)
            }
            try Simulate.finish(outcome)
        }
    }

    struct Root: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print the simulator's root certificate (PEM), for --root; with --receipt, its receipt root, for --receipt-root."
        )

        @Flag(help: "Print the root of the simulator's receipts instead.")
        var receipt = false

        func run() throws {
            let authority = try SimulatedAttestationAuthority()
            print(self.receipt ? try authority.receiptAuthority.rootCertificate.serializeAsPEM().pemString : try authority.rootPEM)
        }
    }

    /// Registers `--keys` keys in the store and writes `--per-key` assertion requests for each,
    /// in counter order, as JSON Lines `{"connection": i, "body": {...}}`: the input of
    /// benchmarks/http/loadgen.py, which gives each key its own connection.
    struct PrepareLoad: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "prepare-load",
            abstract: "Register simulated keys and write pre-signed assertion requests for a load test."
        )
        @OptionGroup var storeOptions: StoreOptions

        @Option var keys = 8
        @Option(name: .customLong("per-key")) var perKey = 1000
        @Option var seed: UInt64 = 1
        @Option(name: .customLong("app-id")) var appID = "ABCDE12345.com.formattest.demo"
        @Option var out: String

        func run() async throws {
            let store = try await self.storeOptions.open()
            let authority = try SimulatedAttestationAuthority()
            let device = SimulatedDevice(authority: authority, appID: self.appID, seed: self.seed)
            let verifier = try AppAttestVerifier(policy: authority.policy(appIDs: [self.appID]))
            let flows = FormFlows(verifier: verifier, store: store)
            guard FileManager.default.createFile(atPath: self.out, contents: nil),
                let handle = FileHandle(forWritingAtPath: self.out)
            else { throw UsageError("cannot create \(self.out)") }
            defer { try? handle.close() }
            let now = Date()
            for index in 0..<self.keys {
                let user = "load-\(index)"
                let key = device.key(index)
                let registration = try Self.form(user: user, nonce: "register-\(index)-\(UUID().uuidString)", at: now)
                do {
                    _ = try await flows.attest(
                        FormFlows.AttestRequest(
                            username: user,
                            keyID: key.keyID,
                            attestationObject: try device.attest(key, clientDataHash: try SignedForm(jsonBytes: registration).clientDataHash, at: now),
                            form: registration
                        ),
                        now: now
                    )
                } catch let error as FlowError {
                    throw UsageError("registering key \(index): \(error.code) \(error.reason)")
                }
                let stored = try await store.loadKey(keyID: key.keyID)
                var counter = stored?.counter ?? 0
                for number in 0..<self.perKey {
                    counter += 1
                    let form = try Self.form(user: user, nonce: "n-\(index)-\(number)-\(UUID().uuidString)", at: now)
                    let assertion = try device.assert(key, clientDataHash: try SignedForm(jsonBytes: form).clientDataHash, counter: counter)
                    let body = JSONValue.object(
                        JSONObject(constantMembers: [
                            ("username", .string(JSONString(user))),
                            ("keyId", .string(JSONString(Base64URL.encode(key.keyID)))),
                            ("assertion", .string(JSONString(Base64URL.encode(assertion)))),
                            ("form", try CanonicalJSON.parse(form)),
                        ])
                    )
                    let line = JSONValue.object(JSONObject(constantMembers: [("connection", .number(Double(index))), ("body", body)]))
                    try handle.write(contentsOf: Data(line.canonicalBytes + [0x0A]))
                }
            }
        }

        static func form(user: String, nonce: String, at date: Date) throws -> [UInt8] {
            DemoTransferForm.bytes(username: user, timestamp: RFC3339UTC.format(date), nonce: nonce)
        }
    }
}
