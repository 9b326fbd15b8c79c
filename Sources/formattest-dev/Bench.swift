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
import FormAttestTokens
import Foundation
import RFC3339
import X509

/// `formattest bench`: throughput and latency of the hot paths, printed as JSON.
///
/// Each case runs in batches for `--duration` seconds on the calling thread (one core); a batch's
/// time divided by its size is one latency sample, so clock overhead never dominates operations
/// that take a microsecond. Build with `-c release` for figures worth quoting.
///
/// It runs from any directory: the default fixtures are found in the package this executable was
/// built from (not the working directory), the SQLite flow store lives in a temporary directory
/// removed at the end, and each case's name is written to stderr as it starts.
struct Bench: AsyncParsableCommand {
    /// The package's root, from this source file's place in it (Sources/formattest/Bench.swift).
    static let packageDirectory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent()
        .deletingLastPathComponent()
        .deletingLastPathComponent()

    static func packageFile(_ relativePath: String) -> String {
        Self.packageDirectory.appendingPathComponent(relativePath).path
    }

    static let configuration = CommandConfiguration(
        abstract: "Measure canonicalization, verification and the cryptographic limit; print JSON."
    )

    @Option(help: "Seconds per case.")
    var duration: Double = 2

    @Option(help: "Comma-separated groups to run: jcs, attestation, assertion, jws, flow, limit, evidence, passkey (default: all).")
    var only: String = "jcs,attestation,assertion,jws,flow,limit,evidence,passkey"

    @Option(name: .customLong("flow-store"), help: "Stores for the flow cases: memory, sqlite (in a temporary directory, removed), and a MongoDB URI (a bench_* database, not dropped) (repeatable).")
    var flowStores: [String] = ["memory", "sqlite"]

    @Option(help: "A real sample (JSON, as in Tests/Fixtures/appattest/samples) for attestation cases (default: the package's).")
    var sample = Bench.packageFile("Tests/Fixtures/appattest/samples/uebelack_production.json")

    @Option(name: .customLong("form"), help: "The small form for the jcs cases (default: the package's).")
    var formPath = Bench.packageFile("benchmarks/jcs/form-small.json")

    @Option(name: .customLong("document"), help: "The large document for the jcs cases (default: the package's).")
    var documentPath = Bench.packageFile("benchmarks/jcs/doc-1mb.json")

    struct CaseResult: Encodable {
        var name: String
        var operations: Int
        var seconds: Double
        var opsPerSecond: Double
        var megabytesPerSecond: Double?
        var p50Microseconds: Double
        var p90Microseconds: Double
        var p99Microseconds: Double
        /// seconds / operations, in µs (what the ratios divide).
        var meanMicroseconds: Double
    }

    /// One goal of the performance issue: a case's mean time over the sum of others', from the
    /// same run.
    struct Ratio: Encodable {
        var name: String
        var numerator: [String]
        var denominator: [String]
        var numeratorMicroseconds: Double
        var denominatorMicroseconds: Double
        var ratio: Double
        /// The bound on `ratio`, when it sets one.
        var goal: Double?
        var met: Bool?
    }

    struct Report: Encodable {
        var build: String
        var machine: Machine
        var durationPerCase: Double
        var cases: [CaseResult]
        var ratios: [Ratio]
        /// µs of one assertion verification plus one JWS signing (means): the server's CPU per
        /// HTTP assert is compared with this by benchmarks/http/run.sh.
        var cpuBudgetMicroseconds: Double?
    }

    struct Machine: Encodable {
        var cores: Int
        var os: String
    }

    func run() async throws {
        let groups = Set(self.only.split(separator: ",").map { String($0) })
        // Every file the bench writes (the SQLite flow store) goes here, and goes with it.
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("formattest-bench-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(at: scratch) }
        var cases: [CaseResult] = []
        if groups.contains("jcs") { cases += try self.jcsCases() }
        if groups.contains("attestation") { cases += try await self.attestationCases() }
        if groups.contains("assertion") { cases += try self.assertionCases() }
        if groups.contains("jws") { cases += try await self.jwsCases() }
        if groups.contains("flow") {
            for store in self.flowStores { cases.append(try await self.flowCase(store: store, scratch: scratch)) }
        }
        if groups.contains("limit") { cases += try self.limitCases() }
        if groups.contains("evidence") { cases += try await self.evidenceCases() }
        if groups.contains("passkey") { cases += try self.passkeyCases() }
        #if DEBUG
        let build = "debug"
        #else
        let build = "release"
        #endif
        let report = Report(
            build: build,
            machine: Machine(cores: ProcessInfo.processInfo.activeProcessorCount, os: ProcessInfo.processInfo.operatingSystemVersionString),
            durationPerCase: self.duration,
            cases: cases,
            ratios: Self.ratios(cases),
            cpuBudgetMicroseconds: Self.mean(of: ["assertion.verify", "jws.sign(server-attestation)"], in: cases)
        )
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        print(String(decoding: try encoder.encode(report), as: UTF8.self))
    }

    // MARK: - Cases

    private func jcsCases() throws -> [CaseResult] {
        let form = try InputFile.readBytes(self.formPath)
        let document = try InputFile.readBytes(self.documentPath, limit: 1 << 30)
        return [
            try self.measure("jcs.canonicalize.form-small", bytesPerOperation: form.count) {
                _ = try CanonicalJSON.canonicalize(form)
            },
            try self.measure("jcs.canonicalize+sha256.form-small", bytesPerOperation: form.count) {
                _ = SHA256.hash(data: try CanonicalJSON.canonicalize(form))
            },
            try self.measure("jcs.canonicalize.doc-1mb", bytesPerOperation: document.count) {
                _ = try CanonicalJSON.canonicalize(document, limits: .init(maximumSize: 1 << 30))
            },
        ]
    }

    private func attestationCases() async throws -> [CaseResult] {
        let sample = try BenchSample(path: self.sample)
        let real = try AppAttestVerifier(policy: AppAttestPolicy(appIDs: [sample.appID], environments: [.development, .production]))
        let authority = try SimulatedAttestationAuthority()
        let device = SimulatedDevice(authority: authority, appID: sample.appID)
        let key = device.key(0)
        let at = Date(timeIntervalSince1970: 1_749_988_800)
        let simulated = try device.attest(key, clientDataHash: sample.clientDataHash, at: at)
        let simulatedVerifier = try AppAttestVerifier(policy: authority.policy(appIDs: [sample.appID]))
        let statement = try AttestationObject(cborEncoded: sample.attestation).statement
        let expectation = ReceiptExpectation(
            appID: sample.appID,
            attestedKey: .certificate(statement.leafCertificate),
            clientHash: sample.clientDataHash,
            type: .attest
        )
        return [
            try self.measure("receipt.parse(\(sample.name))") {
                _ = try AppAttestReceipt(berEncoded: statement.receipt)
            },
            try await self.measureAsync("receipt.verify(\(sample.name))") {
                _ = try await real.verifyReceipt(statement.receipt, expecting: expectation, at: sample.validAt)
            },
            try await self.measureAsync("attestation.verify.real(\(sample.name))") {
                _ = try await real.verifyAttestation(sample.attestation, keyID: sample.keyID, clientDataHash: sample.clientDataHash, at: sample.validAt)
            },
            try await self.measureAsync("attestation.verify.simulated") {
                _ = try await simulatedVerifier.verifyAttestation(simulated, keyID: key.keyID, clientDataHash: sample.clientDataHash, at: at)
            },
        ]
    }

    private func assertionCases() throws -> [CaseResult] {
        let device = SimulatedDevice(authority: try SimulatedAttestationAuthority(), appID: "ABCDE12345.com.formattest.bench")
        let key = device.key(0)
        let hash = Array(SHA256.hash(data: Array("form".utf8)))
        let assertion = try device.assert(key, clientDataHash: hash, counter: 1)
        let verifier = try AppAttestVerifier(policy: AppAttestPolicy(appIDs: [device.appID], environments: [.development]))
        let form = try InputFile.readBytes(self.formPath)
        return [
            try self.measure("assertion.verify") {
                _ = try verifier.verifyAssertion(assertion, publicKey: key.publicKey, clientDataHash: hash, previousCounter: 0)
            },
            try self.measure("assertion.verify+form-hash") {
                let formHash = SHA256.hash(data: try CanonicalJSON.canonicalize(form))
                _ = formHash
                _ = try verifier.verifyAssertion(assertion, publicKey: key.publicKey, clientDataHash: hash, previousCounter: 0)
            },
        ]
    }

    /// Signing the token an accepted assertion answers with (`formats.serverAttestation`): the
    /// server's own P-256 signature, through jwt-kit as the service signs it, and the bare
    /// signature for comparison.
    private func jwsCases() async throws -> [CaseResult] {
        let device = SimulatedDevice(authority: try SimulatedAttestationAuthority(), appID: "ABCDE12345.com.formattest.bench")
        let key = device.key(0)
        let signing = P256.Signing.PrivateKey()
        let signer = ServerAttestationSigner(keys: SigningKeys(current: signing), issuer: "https://formattest.example", audience: "bench")
        let credential = AttestedCredential(keyID: key.keyID, publicKey: key.publicKey, appID: device.appID, environment: "development")
        let formHash = Array(SHA256.hash(data: Array("form".utf8)))
        let now = Date()
        return [
            try self.measure("limit.p256.sign") {
                _ = try signing.signature(for: formHash)
            },
            try await self.measureAsync("jws.sign(server-attestation)") {
                _ = try signer.sign(username: "bench", credential: credential, formHash: formHash, counter: 1, now: now)
            },
        ]
    }

    /// The ratios, each from this run's means; a ratio whose cases did not run is left out.
    static func ratios(_ cases: [CaseResult]) -> [Ratio] {
        let attestation = cases.first { $0.name.hasPrefix("attestation.verify.real(") }?.name ?? "attestation.verify.real"
        let definitions: [(String, [String], [String], Double?)] = [
            ("flow.assert.memory / (assertion.verify+form-hash)", ["flow.assert.memory"], ["assertion.verify+form-hash"], 1.5),
            ("flow.assert.sqlite / (assertion.verify+form-hash)", ["flow.assert.sqlite"], ["assertion.verify+form-hash"], nil),
            (
                "(assertion.verify+form-hash) / (p256.verify + its hashes)", ["assertion.verify+form-hash"],
                ["limit.p256.verify", "limit.sha256(authData+clientDataHash)+sha256(key)"], 1.2
            ),
            (
                "attestation.verify.real / (p384.verify + p256.verify + hashes)", [attestation],
                ["limit.p384.verify(leaf, sha256)", "limit.p256.verify", "limit.sha256(authData+clientDataHash)+sha256(key)"], 1.2
            ),
            ("jws.sign / p256.sign", ["jws.sign(server-attestation)"], ["limit.p256.sign"], nil),
            (
                "passkey.assertion.verify / (sha256(clientDataJSON) + p256.verify)", ["passkey.assertion.verify"],
                ["limit.passkey(sha256(clientDataJSON)+p256.verify)"], 1.2
            ),
        ]
        return definitions.compactMap { name, numerator, denominator, goal in
            guard let top = Self.mean(of: numerator, in: cases), let bottom = Self.mean(of: denominator, in: cases), bottom > 0 else { return nil }
            let ratio = (top / bottom * 1000).rounded() / 1000
            return Ratio(
                name: name, numerator: numerator, denominator: denominator, numeratorMicroseconds: top, denominatorMicroseconds: bottom,
                ratio: ratio, goal: goal, met: goal.map { ratio <= $0 }
            )
        }
    }

    /// The sum of the named cases' means (µs), or `nil` when one did not run.
    static func mean(of names: [String], in cases: [CaseResult]) -> Double? {
        var total = 0.0
        for name in names {
            guard let found = cases.first(where: { $0.name == name }) else { return nil }
            total += found.meanMicroseconds
        }
        return (total * 100).rounded() / 100
    }

    /// One complete assertion flow (form parse and policy, key load, verification, atomic commit)
    /// through a store, in process. The assertions are signed beforehand, each over its own form
    /// with the next counter, so that only the server's work is measured.
    private func flowCase(store location: String, scratch: URL) async throws -> CaseResult {
        let name = location.hasPrefix("mongodb") ? "mongodb" : location
        Self.progress("flow.assert.\(name): registering a key and pre-signing the requests")
        var options = try StoreOptions.parse(["--store", location == "sqlite" ? "sqlite:" + scratch.appendingPathComponent("bench.sqlite").path : location])
        options.mongoDatabase = "bench_\(UUID().uuidString.prefix(8))"
        let store = try await options.open()
        let authority = try SimulatedAttestationAuthority()
        let device = SimulatedDevice(authority: authority, appID: "ABCDE12345.com.formattest.bench", seed: 99)
        let verifier = try AppAttestVerifier(policy: authority.policy(appIDs: [device.appID]))
        let flows = FormFlows(verifier: verifier, store: store)
        let key = device.generateKey()
        let now = Date()
        func form(_ nonce: String) throws -> [UInt8] {
            DemoTransferForm.bytes(username: "bench", timestamp: RFC3339UTC.format(now), nonce: nonce)
        }
        let registration = try form("register")
        do {
            _ = try await flows.attest(
                FormFlows.AttestRequest(
                    username: "bench", keyID: key.keyID,
                    attestationObject: try device.attest(key, clientDataHash: try SignedForm(jsonBytes: registration).clientDataHash, at: now),
                    form: registration
                ),
                now: now
            )
        } catch let error as FlowError {
            throw UsageError("bench registration failed: \(error)")
        }
        // Enough pre-signed requests for the case's duration at up to 20,000 per second.
        let count = max(100, Int(self.duration * 20_000))
        var requests: [FormFlows.AssertRequest] = []
        requests.reserveCapacity(count)
        for index in 0..<count {
            let body = try form("n\(index)")
            requests.append(
                FormFlows.AssertRequest(
                    username: "bench", keyID: key.keyID,
                    assertion: try device.assert(key, clientDataHash: try SignedForm(jsonBytes: body).clientDataHash, counter: UInt32(index + 1)),
                    form: body
                )
            )
        }
        var next = 0
        return try await self.measureAsync("flow.assert.\(name)") {
            guard next < requests.count else { throw UsageError("ran out of pre-signed requests") }
            do {
                _ = try await flows.assert(requests[next], now: now)
            } catch let error as FlowError {
                throw UsageError("flow rejected a genuine request: \(error)")
            }
            next += 1
        }
    }

    /// The operations no verifier can avoid, through the same library (swift-crypto).
    private func limitCases() throws -> [CaseResult] {
        let sample = try BenchSample(path: self.sample)
        let object = try AttestationObject(cborEncoded: sample.attestation)
        let (leaf, intermediate) = try object.statement.parsedCertificates()
        guard let intermediateKey = P384.Signing.PublicKey(intermediate.publicKey),
            let rootKey = P384.Signing.PublicKey(AppleAppAttestationRoot.certificate.publicKey)
        else { throw UsageError("the sample's chain is not P-384") }
        let leafTBS = leaf.tbsCertificateBytes
        let leafSignature = try P384.Signing.ECDSASignature(derRepresentation: leaf.signature.rawRepresentation)
        let intermediateTBS = intermediate.tbsCertificateBytes
        let intermediateSignature = try P384.Signing.ECDSASignature(derRepresentation: intermediate.signature.rawRepresentation)
        let p256 = P256.Signing.PrivateKey()
        let nonce = Array(SHA256.hash(data: Array("nonce".utf8)))
        let p256Signature = try p256.signature(for: nonce)
        let authData = object.authenticatorData.rawValue
        return [
            try self.measure("limit.p384.verify(leaf, sha256)") {
                guard intermediateKey.isValidSignature(leafSignature, for: SHA256.hash(data: leafTBS)) else { throw UsageError("bad") }
            },
            try self.measure("limit.p384.verify(intermediate, sha384)") {
                guard rootKey.isValidSignature(intermediateSignature, for: SHA384.hash(data: intermediateTBS)) else { throw UsageError("bad") }
            },
            try self.measure("limit.p256.verify") {
                guard p256.publicKey.isValidSignature(p256Signature, for: nonce) else { throw UsageError("bad") }
            },
            try self.measure("limit.sha256(authData+clientDataHash)+sha256(key)", bytesPerOperation: authData.count + 32 + 65) {
                var hasher = SHA256()
                hasher.update(data: authData)
                hasher.update(data: sample.clientDataHash)
                _ = hasher.finalize()
                _ = SHA256.hash(data: Array(p256.publicKey.x963Representation))
            },
        ]
    }

    // MARK: - Measurement

    /// One line on stderr, so that a run on a terminal shows where it is (stdout stays the JSON).
    static func progress(_ text: String) {
        FileHandle.standardError.write(Data("bench: \(text)\n".utf8))
    }

    func measure(_ name: String, bytesPerOperation: Int? = nil, _ operation: () throws -> Void) throws -> CaseResult {
        Self.progress(name)
        try operation()  // warm up, and fail early on a broken case
        var batch = 1
        var samples: [Double] = []
        var operations = 0
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: .seconds(self.duration))
        let start = clock.now
        while clock.now < deadline {
            let batchStart = clock.now
            for _ in 0..<batch { try operation() }
            let elapsed = Self.seconds(batchStart.duration(to: clock.now))
            operations += batch
            samples.append(elapsed / Double(batch))
            // Aim for batches of about a millisecond.
            if elapsed < 0.001 { batch *= 2 }
        }
        return Self.result(name, operations: operations, seconds: Self.seconds(start.duration(to: clock.now)), samples: samples, bytes: bytesPerOperation)
    }

    func measureAsync(_ name: String, _ operation: () async throws -> Void) async throws -> CaseResult {
        Self.progress(name)
        try await operation()
        var samples: [Double] = []
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: .seconds(self.duration))
        let start = clock.now
        while clock.now < deadline {
            let operationStart = clock.now
            try await operation()
            samples.append(Self.seconds(operationStart.duration(to: clock.now)))
        }
        return Self.result(name, operations: samples.count, seconds: Self.seconds(start.duration(to: clock.now)), samples: samples, bytes: nil)
    }

    private static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    private static func result(_ name: String, operations: Int, seconds: Double, samples: [Double], bytes: Int?) -> CaseResult {
        let sorted = samples.sorted()
        func percentile(_ p: Double) -> Double {
            guard !sorted.isEmpty else { return 0 }
            return sorted[min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.down)))] * 1e6
        }
        let opsPerSecond = Double(operations) / seconds
        return CaseResult(
            name: name,
            operations: operations,
            seconds: seconds,
            // Whole operations per second, but two decimals for slow cases (one 1 MB document
            // on a loaded debug build takes seconds, and must not print as 0).
            opsPerSecond: opsPerSecond >= 100 ? opsPerSecond.rounded() : (opsPerSecond * 100).rounded() / 100,
            megabytesPerSecond: bytes.map { (Double($0) * opsPerSecond / 1e6 * 10).rounded() / 10 },
            p50Microseconds: (percentile(0.5) * 100).rounded() / 100,
            p90Microseconds: (percentile(0.9) * 100).rounded() / 100,
            p99Microseconds: (percentile(0.99) * 100).rounded() / 100,
            meanMicroseconds: operations > 0 ? (seconds / Double(operations) * 1e8).rounded() / 100 : 0
        )
    }
}

/// A real sample file (the fixture JSON format).
struct BenchSample {
    let name: String
    let attestation: [UInt8]
    let keyID: [UInt8]
    let appID: String
    let clientDataHash: [UInt8]
    let validAt: Date

    init(path: String) throws {
        guard let object = try JSONSerialization.jsonObject(with: Data(InputFile.readBytes(path))) as? [String: Any],
            let attestation = (object["attestation_b64"] as? String).flatMap({ Data(base64Encoded: $0) }),
            let keyID = (object["key_id_b64"] as? String).flatMap({ Data(base64Encoded: $0) }),
            let appID = object["app_id"] as? String,
            let hash = (object["client_data_hash_hex"] as? String).flatMap(HexCoding.decode),
            let validAt = try (object["valid_at"] as? String).map(RFC3339UTC.argument)
        else { throw UsageError("\(path) is not a sample with an attestation") }
        self.name = URL(fileURLWithPath: path).deletingPathExtension().lastPathComponent
        self.attestation = Array(attestation)
        self.keyID = Array(keyID)
        self.appID = appID
        self.clientDataHash = hash
        self.validAt = validAt
    }
}
