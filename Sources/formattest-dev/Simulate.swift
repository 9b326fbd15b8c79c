//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import ArgumentParser
import CanonicalJSON
import Crypto
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
        subcommands: [Register.self, Assert.self, PrepareLoad.self, Root.self, BatchInput.self]
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

    /// A `wrap --batch` input of any size: `--keys` simulated attestations (each over its own
    /// clientDataHash, at `--at`), repeated over `--count` lines named `item-<n>`. Verify with
    /// `formattest wrap --batch FILE --root <(formattest-dev simulate root) ...`.
    struct BatchInput: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "batch-input",
            abstract: "Write a wrap --batch input of simulated attestations (JSON Lines); verify it with --root from 'simulate root'."
        )

        @Option var count = 10_000
        @Option(help: "Distinct attestations (keys) the lines cycle through.")
        var keys = 16
        @Option var seed: UInt64 = 1
        @Option(name: .customLong("app-id")) var appID = "ABCDE12345.com.formattest.demo"
        @Option(help: "The attestations' time and the lines' at (RFC 3339 UTC); default now.")
        var at: String?
        @Option(name: .customLong("format"), help: "The lines' formats (repeatable); default fido2.")
        var formats: [String] = []
        @Option(help: "The file to write ('-': stdout); never over an existing file.")
        var out: String

        func validate() throws {
            guard self.count >= 0, self.keys > 0 else { throw ValidationError("--count must be at least 0 and --keys at least 1.") }
        }

        func run() async throws {
            let at = try self.at.map(RFC3339UTC.argument) ?? Date()
            let device = SimulatedDevice(authority: try SimulatedAttestationAuthority(), appID: self.appID, seed: self.seed)
            var attested: [(attestation: String, keyID: String, hash: String)] = []
            for index in 0..<self.keys {
                let key = device.key(index)
                let hash = Array(SHA256.hash(data: Array("batch-input \(self.seed) \(index)".utf8)))
                let attestation = try device.attest(key, clientDataHash: hash, at: at)
                attested.append((Base64URL.encode(attestation), Base64URL.encode(key.keyID), AppAttest.hex(hash)))
            }
            let formats = JSONValue.array((self.formats.isEmpty ? ["fido2"] : self.formats).map { .string(JSONString($0)) })
            let handle: FileHandle
            if self.out == "-" {
                handle = FileHandle.standardOutput
            } else {
                guard !FileManager.default.fileExists(atPath: self.out), FileManager.default.createFile(atPath: self.out, contents: nil),
                    let opened = FileHandle(forWritingAtPath: self.out)
                else { throw UsageError("\(self.out) exists or cannot be created; it is not overwritten") }
                handle = opened
            }
            defer { if self.out != "-" { try? handle.close() } }
            var buffer: [UInt8] = []
            for number in 0..<self.count {
                let item = attested[number % attested.count]
                let line = JSONValue.object(
                    JSONObject(constantMembers: [
                        ("name", .string(JSONString("item-\(number + 1)"))),
                        ("attestation", .string(JSONString(item.attestation))),
                        ("keyId", .string(JSONString(item.keyID))),
                        ("appId", .string(JSONString(self.appID))),
                        ("clientDataHash", .string(JSONString(item.hash))),
                        ("at", .string(JSONString(RFC3339UTC.format(at)))),
                        ("formats", formats),
                    ])
                )
                buffer += line.canonicalBytes
                buffer.append(0x0A)
                if buffer.count >= 1 << 20 {
                    try handle.write(contentsOf: buffer)
                    buffer.removeAll(keepingCapacity: true)
                }
            }
            try handle.write(contentsOf: buffer)
        }
    }
}
