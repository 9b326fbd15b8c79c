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
        subcommands: [Register.self, Assert.self, PrepareLoad.self, Backlog.self, BatchInput.self, Root.self]
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

    /// Fills a store with what months of traffic leave behind, fast: registered keys, and expired
    /// replay records and challenges that the service's purge has not deleted yet. For the
    /// sustained-operation benchmarks and tests (docs/performance.md).
    ///
    /// Key `i` is the simulated device's key `i` (`--seed`), registered to user `backlog-i`, so
    /// that a load generator can sign with it. To stay fast at millions of keys, every key row
    /// carries key 0's attestation object and receipt (real ones, of real size): the keys assert,
    /// but an evidence record of one of them would not verify. Forms and challenges are random
    /// 32-byte values that expired within the hour before now.
    struct Backlog: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Fill a store with registered simulated keys and expired replay records and challenges."
        )
        @OptionGroup var storeOptions: StoreOptions

        @Option(help: "Registered keys (key i of the device, user backlog-i).")
        var keys = 0
        @Option(name: .customLong("expired-forms"), help: "Expired replay records (accepted forms whose window has passed).")
        var expiredForms = 0
        @Option(help: "Expired challenges.")
        var challenges = 0
        @Option(name: .customLong("rate-windows"), help: "Expired rate-limit windows.")
        var rateWindows = 0
        @Option var seed: UInt64 = 1
        @Option(name: .customLong("app-id")) var appID = "ABCDE12345.com.formattest.demo"
        @Option(help: "Writes in flight at once (the store groups them into transactions).")
        var concurrency = 1024

        /// What the command prints.
        struct Summary: Encodable {
            var keys: Int
            var expiredForms: Int
            var challenges: Int
            var rateWindows: Int
            var seconds: Double
        }

        func validate() throws {
            guard self.keys >= 0, self.expiredForms >= 0, self.challenges >= 0, self.rateWindows >= 0 else {
                throw ValidationError("--keys, --expired-forms, --challenges and --rate-windows take counts (0 or more)")
            }
            guard (1...100_000).contains(self.concurrency) else { throw ValidationError("--concurrency takes 1 to 100000") }
        }

        func run() async throws {
            guard let store = try await self.storeOptions.open() as? any StepwiseAttestationStore else {
                throw UsageError("this store cannot insert keys directly")
            }
            let started = ContinuousClock.now
            let now = Date()
            if self.keys > 0 { try await self.registerKeys(store, now: now) }
            try await Self.inParallel(count: self.expiredForms, width: self.concurrency) { index throws(StoreError) in
                try await store.recordFormHash(ReplayRecord(formHash: Self.value("form", index), expiresAt: Self.expiry(index, now: now)), now: now)
            }
            try await Self.inParallel(count: self.challenges, width: self.concurrency) { index throws(StoreError) in
                try await store.issueChallenge(
                    IssuedChallenge(
                        value: Self.value("challenge", index),
                        purpose: .form,
                        username: nil,
                        issuedAt: now.addingTimeInterval(-7200),
                        expiresAt: Self.expiry(index, now: now)
                    )
                )
            }
            try await Self.inParallel(count: self.rateWindows, width: self.concurrency) { index throws(StoreError) in
                _ = try await store.countRequest(
                    in: RateLimitWindow(id: Self.value("window", index), start: now.addingTimeInterval(-7200), expiresAt: Self.expiry(index, now: now))
                )
            }
            await store.shutdown()
            let elapsed = started.duration(to: .now)
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            let summary = Summary(
                keys: self.keys,
                expiredForms: self.expiredForms,
                challenges: self.challenges,
                rateWindows: self.rateWindows,
                seconds: seconds
            )
            print(try JSONOutput.string(summary))
        }

        private func registerKeys(_ store: any StepwiseAttestationStore, now: Date) async throws {
            let authority = try SimulatedAttestationAuthority()
            let device = SimulatedDevice(authority: authority, appID: self.appID, seed: self.seed)
            let verifier = try AppAttestVerifier(policy: authority.policy(appIDs: [self.appID]))
            let template = device.key(0)
            let clientDataHash = Self.value("registration", 0)
            let object = try device.attest(template, clientDataHash: clientDataHash, at: now)
            let attested = try await verifier.verifyAttestation(object, keyID: template.keyID, clientDataHash: clientDataHash, at: now)
            let keys = self.keys
            let appID = self.appID
            try await Self.inParallel(count: keys, width: self.concurrency) { index throws(StoreError) in
                let key = device.key(index)
                try await store.insertKey(
                    StoredKey(
                        keyID: key.keyID,
                        username: "backlog-\(index)",
                        publicKey: Array(key.publicKey.x963Representation),
                        counter: 0,
                        appID: appID,
                        environment: attested.environment,
                        receipt: attested.receipt,
                        createdAt: now,
                        lastUsed: now,
                        attestation: KeyAttestation(object: object, clientDataHash: clientDataHash)
                    )
                )
            }
        }

        /// A value of 32 bytes, the same for the same kind and index.
        static func value(_ kind: String, _ index: Int) -> [UInt8] {
            Array(SHA256.hash(data: Array("formattest-backlog-\(kind)-\(index)".utf8)))
        }

        /// Expired within the hour before `now`, spread over it.
        static func expiry(_ index: Int, now: Date) -> Date {
            now.addingTimeInterval(-1 - Double(index % 3600))
        }

        /// Runs `body` for 0..<count with at most `width` calls in flight.
        static func inParallel(
            count: Int,
            width: Int,
            _ body: @escaping @Sendable (Int) async throws(StoreError) -> Void
        ) async throws {
            try await withThrowingTaskGroup(of: Void.self) { group in
                var next = 0
                while next < min(width, count) {
                    let index = next
                    group.addTask { try await body(index) }
                    next += 1
                }
                while try await group.next() != nil {
                    guard next < count else { continue }
                    let index = next
                    group.addTask { try await body(index) }
                    next += 1
                }
            }
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
