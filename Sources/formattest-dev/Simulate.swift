//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import ArgumentParser
import CanonicalJSON
import Crypto
import FormAttestFlows
import FormAttestForm
import FormattestCommands
import Foundation
import MongoAttestStore
import RFC3339
import SQLiteAttestStore
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
            let stamp =
                try self.timestamp.map { text -> String in
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
                            attestationObject: try device.attest(
                                key, clientDataHash: try SignedForm(jsonBytes: registration).clientDataHash, at: now),
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
    /// replay records, challenges and rate-limit windows that the service's purge has not deleted
    /// yet. For the sustained-operation benchmarks and tests (docs/performance.md).
    ///
    /// Rows go in batches of `--batch` through the store's own bulk path
    /// (`insertBacklog`: on SQLite the per-row statements prepared once, one transaction and one
    /// fsync a batch; on MongoDB one ordered `insert` command per 500 documents), not one group
    /// commit a row. Not for a store a running service is using: each batch holds the writer.
    ///
    /// Key `i` below `--signing-keys` (default: every key) is the simulated device's key `i`
    /// (`--seed`), registered to user `backlog-i`, so that a load generator can sign with it.
    /// To stay fast at millions of keys, every such row carries key 0's attestation object and
    /// receipt (real ones, of real size): the keys assert, but an evidence record of one of them
    /// would not verify. Keys from `--signing-keys` on are fillers that never sign: a keyId that
    /// is a SHA-256 value like a real one (so the indexes have the real shape), key 0's public
    /// key, and with `--filler-blobs small` a 64-byte receipt and no attestation object, so that
    /// 10^7 keys fit a disk (about 8.4 KB a key with full blobs). Forms, challenges and windows
    /// are 32-byte values that expired within the hour before now.
    struct Backlog: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Fill a store with registered simulated keys and expired replay records, challenges and rate-limit windows."
        )
        @OptionGroup var storeOptions: StoreOptions

        @Option(help: "Registered keys (key i of the device, user backlog-i).")
        var keys = 0
        @Option(name: .customLong("signing-keys"), help: "Keys 0..<N that can sign (the device's own); the rest are fillers. Default: every key.")
        var signingKeys: Int?
        @Option(
            name: .customLong("filler-blobs"),
            help: "full: fillers carry key 0's real receipt and attestation; small: a 64-byte receipt, no attestation.")
        var fillerBlobs: FillerBlobs = .full
        @Option(name: .customLong("expired-forms"), help: "Expired replay records (accepted forms whose window has passed).")
        var expiredForms = 0
        @Option(help: "Expired challenges.")
        var challenges = 0
        @Option(name: .customLong("rate-windows"), help: "Expired rate-limit windows.")
        var rateWindows = 0
        @Option var seed: UInt64 = 1
        @Option(name: .customLong("app-id")) var appID = "ABCDE12345.com.formattest.demo"
        @Option(help: "Rows a transaction (SQLite) or a call (MongoDB: in commands of 500 documents).")
        var batch = 50_000

        enum FillerBlobs: String, ExpressibleByArgument, CaseIterable {
            case full, small
        }

        /// What the command prints.
        struct Summary: Encodable {
            var keys: Int
            var signingKeys: Int
            var expiredForms: Int
            var challenges: Int
            var rateWindows: Int
            var seconds: Double
        }

        func validate() throws {
            guard self.keys >= 0, self.expiredForms >= 0, self.challenges >= 0, self.rateWindows >= 0 else {
                throw ValidationError("--keys, --expired-forms, --challenges and --rate-windows take counts (0 or more)")
            }
            if let signingKeys = self.signingKeys, !(0...self.keys).contains(signingKeys) {
                throw ValidationError("--signing-keys takes 0 to --keys")
            }
            guard (1...1_000_000).contains(self.batch) else { throw ValidationError("--batch takes 1 to 1000000") }
        }

        func run() async throws {
            let store = try await BacklogStore(try await self.storeOptions.open())
            let started = ContinuousClock.now
            let now = Date()
            let signingKeys = self.signingKeys ?? self.keys
            if self.keys > 0 { try await self.registerKeys(store, signing: signingKeys, now: now) }
            for range in Self.batches(self.expiredForms, self.batch) {
                try await store.insert(
                    replayRecords: range.map { ReplayRecord(formHash: Self.value("form", $0), expiresAt: Self.expiry($0, now: now)) }, now: now)
            }
            for range in Self.batches(self.challenges, self.batch) {
                try await store.insert(
                    challenges: range.map {
                        IssuedChallenge(
                            value: Self.value("challenge", $0), purpose: .form, username: nil, issuedAt: now.addingTimeInterval(-7200),
                            expiresAt: Self.expiry($0, now: now)
                        )
                    },
                    now: now
                )
            }
            for range in Self.batches(self.rateWindows, self.batch) {
                try await store.insert(
                    rateLimitWindows: range.map {
                        RateLimitWindow(id: Self.value("window", $0), start: now.addingTimeInterval(-7200), expiresAt: Self.expiry($0, now: now))
                    },
                    now: now
                )
            }
            await store.shutdown()
            let elapsed = started.duration(to: .now)
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            let summary = Summary(
                keys: self.keys,
                signingKeys: signingKeys,
                expiredForms: self.expiredForms,
                challenges: self.challenges,
                rateWindows: self.rateWindows,
                seconds: seconds
            )
            print(try JSONOutput.string(summary))
        }

        private func registerKeys(_ store: BacklogStore, signing: Int, now: Date) async throws {
            let authority = try SimulatedAttestationAuthority()
            let device = SimulatedDevice(authority: authority, appID: self.appID, seed: self.seed)
            let verifier = try AppAttestVerifier(policy: authority.policy(appIDs: [self.appID]))
            let template = device.key(0)
            let clientDataHash = Self.value("registration", 0)
            let object = try device.attest(template, clientDataHash: clientDataHash, at: now)
            let attested = try await verifier.verifyAttestation(object, keyID: template.keyID, clientDataHash: clientDataHash, at: now)
            let small = self.fillerBlobs == .small
            let rows = KeyRowMaker(
                appID: self.appID,
                environment: attested.environment,
                receipt: attested.receipt,
                attestation: KeyAttestation(object: object, clientDataHash: clientDataHash),
                fillerPublicKey: Array(template.publicKey.x963Representation),
                fillerReceipt: small ? Self.value("receipt-a", 0) + Self.value("receipt-b", 0) : attested.receipt,
                fillerAttestation: small ? nil : KeyAttestation(object: object, clientDataHash: clientDataHash),
                now: now
            )
            for range in Self.batches(signing, self.batch) {
                // The device's keys cost a P-256 point multiplication each: derived on every core.
                try await store.insert(keys: try await Self.onEveryCore(range) { index in rows.signer(index, device.key(index)) }, now: now)
            }
            // The fillers in the order of their keyIds: the B-trees keyed by the keyId (the keys'
            // and the registrations' primary keys) then grow at their end, each page written once,
            // where random keyIds rewrote pages all over them at every batch (the rate fell with the
            // store's size). The store they make is the same. Ordered by the keyId's first 8 bytes
            // (16 bytes a key to sort, not 32); two keyIds that share them may go in either order.
            let order = try await Self.onEveryCore(signing..<max(signing, self.keys)) { index in
                (prefix: Self.value("filler-key", index).prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }, index: index)
            }.sorted { $0.prefix < $1.prefix }
            for part in Self.batches(order.count, self.batch) {
                let fillers = try await Self.onEveryCore(part) { position in rows.filler(order[position].index) }
                try await store.insert(keys: fillers, now: now)
            }
        }

        /// The rows of registered keys: the device's own (they sign), and fillers (they never do).
        struct KeyRowMaker: Sendable {
            let appID: String
            let environment: AppAttestEnvironment
            let receipt: [UInt8]
            let attestation: KeyAttestation
            let fillerPublicKey: [UInt8]
            let fillerReceipt: [UInt8]
            let fillerAttestation: KeyAttestation?
            let now: Date

            func signer(_ index: Int, _ key: SimulatedKey) -> StoredKey {
                self.row(
                    index, keyID: key.keyID, publicKey: Array(key.publicKey.x963Representation), receipt: self.receipt, attestation: self.attestation)
            }

            func filler(_ index: Int) -> StoredKey {
                self.row(
                    index, keyID: Backlog.value("filler-key", index), publicKey: self.fillerPublicKey, receipt: self.fillerReceipt,
                    attestation: self.fillerAttestation)
            }

            private func row(_ index: Int, keyID: [UInt8], publicKey: [UInt8], receipt: [UInt8], attestation: KeyAttestation?) -> StoredKey {
                StoredKey(
                    keyID: keyID, username: "backlog-\(index)", publicKey: publicKey, counter: 0, appID: self.appID,
                    environment: self.environment, receipt: receipt, createdAt: self.now, lastUsed: self.now, attestation: attestation
                )
            }
        }

        /// `0..<count` in consecutive ranges of at most `size`.
        static func batches(_ count: Int, _ size: Int) -> [Range<Int>] {
            stride(from: 0, to: count, by: size).map { $0..<min($0 + size, count) }
        }

        /// `body` over `range`, split over the machine's cores; the results in order.
        static func onEveryCore<T: Sendable>(_ range: Range<Int>, _ body: @escaping @Sendable (Int) -> T) async throws -> [T] {
            guard !range.isEmpty else { return [] }
            let parts = Self.batches(
                range.count, (range.count + ProcessInfo.processInfo.activeProcessorCount - 1) / ProcessInfo.processInfo.activeProcessorCount)
            return try await withThrowingTaskGroup(of: (Int, [T]).self) { group in
                for (position, part) in parts.enumerated() {
                    group.addTask { (position, part.map { body(range.lowerBound + $0) }) }
                }
                var results = [[T]](repeating: [], count: parts.count)
                for try await (position, values) in group { results[position] = values }
                return results.flatMap { $0 }
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
    }

    /// The bulk path of the two stores (`insertBacklog`); the in-memory store has none.
    struct BacklogStore: Sendable {
        private let sqlite: SQLiteAttestationStore?
        private let mongo: MongoAttestationStore?

        init(_ store: any OperationalAttestationStore) async throws {
            self.sqlite = store as? SQLiteAttestationStore
            self.mongo = store as? MongoAttestationStore
            guard self.sqlite != nil || self.mongo != nil else {
                await store.shutdown()
                throw UsageError("simulate backlog fills a SQLite or MongoDB store, not the in-memory one")
            }
        }

        func insert(
            keys: [StoredKey] = [],
            replayRecords: [ReplayRecord] = [],
            challenges: [IssuedChallenge] = [],
            rateLimitWindows: [RateLimitWindow] = [],
            now: Date
        ) async throws(StoreError) {
            if let sqlite {
                try await sqlite.insertBacklog(
                    keys: keys, replayRecords: replayRecords, challenges: challenges, rateLimitWindows: rateLimitWindows, now: now)
            } else if let mongo {
                try await mongo.insertBacklog(
                    keys: keys, replayRecords: replayRecords, challenges: challenges, rateLimitWindows: rateLimitWindows, now: now)
            }
        }

        func shutdown() async {
            await self.sqlite?.shutdown()
            await self.mongo?.shutdown()
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
