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
import FormAttestServer
import FormAttestTokens
import FormattestCommands
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

    @Option(
        help:
            "Comma-separated groups to run: jcs, attestation, assertion, jws, flow, limit, evidence, passkey, batch, tracing (default: all; batch brings the limit cases; tracing's ratio needs flow)."
    )
    var only: String = "jcs,attestation,assertion,jws,flow,limit,evidence,passkey,batch,tracing"

    @Option(help: "Rounds per ratio: each round times the ratio's cases and its limit in alternating short slices.")
    var slices = 10

    @Option(name: .customLong("batch-lines"), help: "Lines per run of the batch case (a run keeps every core busy).")
    var batchLines = 512

    @Option(
        name: .customLong("flow-store"),
        help:
            "Stores for the flow cases: memory, sqlite (in a temporary directory, removed), and a MongoDB URI (a bench_* database, not dropped) (repeatable)."
    )
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
        /// Flow cases: this process's CPU time (user and system, every thread: the store's driver
        /// runs on NIO's thread pool) per operation over the case, in µs; a separate database
        /// server's is not in it.
        var cpuMicroseconds: Double?
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
        /// The rounds the ratio is the median of, each timing both sides for `sliceSeconds` a case.
        var slices: Int
        var sliceSeconds: Double
        var sliceRatioMinimum: Double
        var sliceRatioMaximum: Double
        /// (maximum − minimum) / ratio over the rounds.
        var spread: Double
        /// For the batch: its throughput over cores × the limit's (1 / ratio).
        var shareOfLimit: Double?
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
        /// What tracing off costs one assert: its steps' no-op spans less the same steps without
        /// them (means, ns); docs/performance.md, "Tracing".
        var tracingOffNanosecondsPerAssert: Double?
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
        let runner = BenchRunner(duration: self.duration, slices: max(1, self.slices))
        var cases: [CaseResult] = []
        if groups.contains("jcs") { cases += try self.jcsCases(runner) }
        if groups.contains("attestation") { cases += try await self.attestationCases(runner) }
        if groups.contains("assertion") { cases += try self.assertionCases(runner) }
        if groups.contains("jws") { cases += try await self.jwsCases(runner) }
        if groups.contains("flow") {
            for store in self.flowStores { cases.append(try await self.flowCase(store: store, scratch: scratch, runner: runner)) }
        }
        if groups.contains("limit") || groups.contains("batch") { cases += try self.limitCases(runner) }
        if groups.contains("evidence") { cases += try await self.evidenceCases(runner) }
        if groups.contains("passkey") { cases += try self.passkeyCases(runner) }
        if groups.contains("batch") { cases.append(try await self.batchCase(runner)) }
        if groups.contains("tracing") { cases += try await self.tracingCases(runner) }
        #if DEBUG
            let build = "debug"
        #else
            let build = "release"
        #endif
        let ratios = try await Self.ratios(cases, runner: runner)
        let report = Report(
            build: build,
            machine: Machine(cores: ProcessInfo.processInfo.activeProcessorCount, os: ProcessInfo.processInfo.operatingSystemVersionString),
            durationPerCase: self.duration,
            cases: cases,
            ratios: ratios,
            cpuBudgetMicroseconds: Self.mean(of: ["assertion.verify", "jws.sign(server-attestation)"], in: cases),
            tracingOffNanosecondsPerAssert: Self.mean(of: [Self.tracingSpansCase], in: cases).flatMap { spans in
                Self.mean(of: [Self.tracingBareCase], in: cases).map { bare in ((spans - bare) * 1000).rounded() }
            }
        )
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        print(String(decoding: try encoder.encode(report), as: UTF8.self))
    }

    // MARK: - Cases

    private func jcsCases(_ runner: BenchRunner) throws -> [CaseResult] {
        let form = try InputFile.readBytes(self.formPath)
        let document = try InputFile.readBytes(self.documentPath, limit: 1 << 30)
        return [
            try runner.measure("jcs.canonicalize.form-small", bytesPerOperation: form.count) {
                _ = try CanonicalJSON.canonicalize(form)
            },
            try runner.measure("jcs.canonicalize+sha256.form-small", bytesPerOperation: form.count) {
                _ = SHA256.hash(data: try CanonicalJSON.canonicalize(form))
            },
            try runner.measure("jcs.canonicalize.doc-1mb", bytesPerOperation: document.count) {
                _ = try CanonicalJSON.canonicalize(document, limits: .init(maximumSize: 1 << 30))
            },
        ]
    }

    private func attestationCases(_ runner: BenchRunner) async throws -> [CaseResult] {
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
            try runner.measure("receipt.parse(\(sample.name))") {
                _ = try AppAttestReceipt(berEncoded: statement.receipt)
            },
            try await runner.measureAsync("receipt.verify(\(sample.name))") {
                _ = try await real.verifyReceipt(statement.receipt, expecting: expectation, at: sample.validAt)
            },
            try await runner.measureAsync("attestation.verify.real(\(sample.name))") {
                _ = try await real.verifyAttestation(
                    sample.attestation, keyID: sample.keyID, clientDataHash: sample.clientDataHash, at: sample.validAt)
            },
            try await runner.measureAsync("attestation.verify.simulated") {
                _ = try await simulatedVerifier.verifyAttestation(simulated, keyID: key.keyID, clientDataHash: sample.clientDataHash, at: at)
            },
        ]
    }

    private func assertionCases(_ runner: BenchRunner) throws -> [CaseResult] {
        let device = SimulatedDevice(authority: try SimulatedAttestationAuthority(), appID: "ABCDE12345.com.formattest.bench")
        let key = device.key(0)
        let hash = Array(SHA256.hash(data: Array("form".utf8)))
        let assertion = try device.assert(key, clientDataHash: hash, counter: 1)
        let verifier = try AppAttestVerifier(policy: AppAttestPolicy(appIDs: [device.appID], environments: [.development]))
        let form = try InputFile.readBytes(self.formPath)
        return [
            try runner.measure("assertion.verify") {
                _ = try verifier.verifyAssertion(assertion, publicKey: key.publicKey, clientDataHash: hash, previousCounter: 0)
            },
            try runner.measure("assertion.verify+form-hash") {
                let formHash = SHA256.hash(data: try CanonicalJSON.canonicalize(form))
                _ = formHash
                _ = try verifier.verifyAssertion(assertion, publicKey: key.publicKey, clientDataHash: hash, previousCounter: 0)
            },
        ]
    }

    /// Signing the token an accepted assertion answers with (`formats.serverAttestation`): the
    /// server's own P-256 signature, through jwt-kit as the service signs it, and the bare
    /// signature for comparison.
    private func jwsCases(_ runner: BenchRunner) async throws -> [CaseResult] {
        let device = SimulatedDevice(authority: try SimulatedAttestationAuthority(), appID: "ABCDE12345.com.formattest.bench")
        let key = device.key(0)
        let signing = P256.Signing.PrivateKey()
        let signer = ServerAttestationSigner(keys: SigningKeys(current: signing), issuer: "https://formattest.example", audience: "bench")
        let credential = AttestedCredential(keyID: key.keyID, publicKey: key.publicKey, appID: device.appID, environment: "development")
        let formHash = Array(SHA256.hash(data: Array("form".utf8)))
        let now = Date()
        return [
            try runner.measure("limit.p256.sign") {
                _ = try signing.signature(for: formHash)
            },
            try await runner.measureAsync("jws.sign(server-attestation)") {
                _ = try signer.sign(username: "bench", credential: credential, formHash: formHash, counter: 1, now: now)
            },
        ]
    }

    /// The ratios, each measured with its two sides interleaved in short alternating
    /// slices (``BenchRunner/interleavedRatio(_:_:)``); a ratio whose cases did not run is left out.
    static func ratios(_ cases: [CaseResult], runner: BenchRunner) async throws -> [Ratio] {
        let attestation = cases.first { $0.name.hasPrefix("attestation.verify.real(") }?.name ?? "attestation.verify.real"
        let batch = cases.first { $0.name.hasPrefix("batch.wrap(") }?.name ?? "batch.wrap"
        let cores = ProcessInfo.processInfo.activeProcessorCount
        let attestationLimit = ["limit.p384.verify(leaf, sha256)", "limit.p256.verify", "limit.sha256(authData+clientDataHash)+sha256(key)"]
        // (name, numerator, denominator, the numerator's scale, goal)
        let definitions: [(String, [String], [String], Double, Double?)] = [
            ("flow.assert.memory / (assertion.verify+form-hash)", ["flow.assert.memory"], ["assertion.verify+form-hash"], 1, 1.5),
            ("flow.assert.sqlite / (assertion.verify+form-hash)", ["flow.assert.sqlite"], ["assertion.verify+form-hash"], 1, nil),
            (
                "(assertion.verify+form-hash) / (p256.verify + its hashes)", ["assertion.verify+form-hash"],
                ["limit.p256.verify", "limit.sha256(authData+clientDataHash)+sha256(key)"], 1, 1.2
            ),
            ("attestation.verify.real / (p384.verify + p256.verify + hashes)", [attestation], attestationLimit, 1, 1.2),
            ("jws.sign / p256.sign", ["jws.sign(server-attestation)"], ["limit.p256.sign"], 1, nil),
            (
                "passkey.assertion.verify / (sha256(clientDataJSON) + p256.verify)", ["passkey.assertion.verify"],
                ["limit.passkey(sha256(clientDataJSON)+p256.verify)"], 1, 1.2
            ),
            // Wall time per line × cores over one core's limit: ≤ 1.25 is ≥ 80 % of cores × the limit.
            ("(batch.wrap × cores) / (p384.verify + p256.verify + hashes)", [batch], attestationLimit, Double(cores), 1.25),
            // Tracing off: an assert's no-op spans (with the calls they wrap) over the in-memory
            // flow alone, less than any served assert costs: an upper bound on their share.
            ("tracing off: an assert's steps through TraceStep / flow.assert.memory", [Self.tracingSpansCase], ["flow.assert.memory"], 1, nil),
        ]
        var ratios: [Ratio] = []
        for (name, numerator, denominator, scale, goal) in definitions {
            guard let measured = try await runner.interleavedRatio(numerator, denominator), measured.denominatorMicroseconds > 0 else { continue }
            func rounded(_ value: Double) -> Double { (value * 1000).rounded() / 1000 }
            let ratio = rounded(measured.ratio * scale)
            ratios.append(
                Ratio(
                    name: name, numerator: numerator, denominator: denominator,
                    numeratorMicroseconds: (measured.numeratorMicroseconds * scale * 100).rounded() / 100,
                    denominatorMicroseconds: (measured.denominatorMicroseconds * 100).rounded() / 100,
                    ratio: ratio, goal: goal, met: goal.map { ratio <= $0 },
                    slices: measured.slices, sliceSeconds: rounded(measured.sliceSeconds),
                    sliceRatioMinimum: rounded(measured.minimum * scale), sliceRatioMaximum: rounded(measured.maximum * scale),
                    spread: rounded((measured.maximum - measured.minimum) / measured.ratio),
                    shareOfLimit: scale == 1 ? nil : rounded(1 / (measured.ratio * scale))
                )
            )
        }
        return ratios
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
    private func flowCase(store location: String, scratch: URL, runner: BenchRunner) async throws -> CaseResult {
        let name = location.hasPrefix("mongodb") ? "mongodb" : location
        BenchRunner.progress("flow.assert.\(name): registering a key and pre-signing the requests")
        var options = try StoreOptions.parse([
            "--store", location == "sqlite" ? "sqlite:" + scratch.appendingPathComponent("bench.sqlite").path : location,
        ])
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
        // Enough pre-signed requests for the case's duration and its ratio's slices (as long again) at
        // up to 20,000 per second.
        let count = max(100, Int(self.duration * 2 * 20_000))
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
        let cpuBefore = Load.cpuMicroseconds()
        var result = try await runner.measureAsync("flow.assert.\(name)") {
            guard next < requests.count else { throw UsageError("ran out of pre-signed requests") }
            do {
                _ = try await flows.assert(requests[next], now: now)
            } catch let error as FlowError {
                throw UsageError("flow rejected a genuine request: \(error)")
            }
            next += 1
        }
        result.cpuMicroseconds = Double(Load.cpuMicroseconds() - cpuBefore) / Double(max(next, 1))
        return result
    }

    /// `wrap --batch`'s pipeline in process over every core (``BatchWrapBenchmark``): the real
    /// sample as a batch line (fido2), `--batch-lines` lines a run, records serialized and dropped.
    private func batchCase(_ runner: BenchRunner) async throws -> CaseResult {
        let sample = try BenchSample(path: self.sample)
        let line = JSONValue.object(
            JSONObject(constantMembers: [
                ("attestation", .string(JSONString(Data(sample.attestation).base64EncodedString()))),
                ("keyId", .string(JSONString(Data(sample.keyID).base64EncodedString()))),
                ("appId", .string(JSONString(sample.appID))),
                ("clientDataHash", .string(JSONString(AppAttest.hex(sample.clientDataHash)))),
                ("at", .string(JSONString(RFC3339UTC.format(sample.validAt)))),
            ])
        ).canonicalBytes
        let cores = ProcessInfo.processInfo.activeProcessorCount
        return try await runner.measureBatch("batch.wrap(\(sample.name), \(cores) cores)", batch: max(1, self.batchLines)) { count in
            let wrapped = try await BatchWrapBenchmark.run(lines: Array(repeating: line, count: count))
            guard wrapped == count else { throw UsageError("the batch wrapped \(wrapped) of \(count) lines") }
        }
    }

    static let tracingSpansCase = "tracing.off.assert-steps(\(TraceStepBenchmark.assertSteps) steps through TraceStep, tracing off)"
    static let tracingBareCase = "tracing.off.assert-steps(\(TraceStepBenchmark.assertSteps) steps, no spans)"

    /// Tracing off (no tracer bootstrapped, as `serve` without `--otlp-endpoint`): the spans an
    /// assert's steps open on the no-op tracer (``TraceStepBenchmark``), against the same steps
    /// without spans, each a batch of 1,000 asserts' worth (a sample is its time / 1,000).
    private func tracingCases(_ runner: BenchRunner) async throws -> [CaseResult] {
        let counter = BenchCounter()
        let body: () async -> Int = { counter.next() }
        return [
            try await runner.measureBatch(Self.tracingSpansCase, batch: 1000) { count in
                var total = 0
                for _ in 0..<count { total &+= await TraceStepBenchmark.withSpans(body) }
                counter.keep(total)
            },
            try await runner.measureBatch(Self.tracingBareCase, batch: 1000) { count in
                var total = 0
                for _ in 0..<count { total &+= await TraceStepBenchmark.withoutSpans(body) }
                counter.keep(total)
            },
        ]
    }

    /// The operations no verifier can avoid, through the same library (swift-crypto).
    private func limitCases(_ runner: BenchRunner) throws -> [CaseResult] {
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
            try runner.measure("limit.p384.verify(leaf, sha256)") {
                guard intermediateKey.isValidSignature(leafSignature, for: SHA256.hash(data: leafTBS)) else { throw UsageError("bad") }
            },
            try runner.measure("limit.p384.verify(intermediate, sha384)") {
                guard rootKey.isValidSignature(intermediateSignature, for: SHA384.hash(data: intermediateTBS)) else { throw UsageError("bad") }
            },
            try runner.measure("limit.p256.verify") {
                guard p256.publicKey.isValidSignature(p256Signature, for: nonce) else { throw UsageError("bad") }
            },
            try runner.measure("limit.sha256(authData+clientDataHash)+sha256(key)", bytesPerOperation: authData.count + 32 + 65) {
                var hasher = SHA256()
                hasher.update(data: authData)
                hasher.update(data: sample.clientDataHash)
                _ = hasher.finalize()
                _ = SHA256.hash(data: Array(p256.publicKey.x963Representation))
            },
        ]
    }
}

/// The tracing cases' step body: a value that changes, and a place to keep the sums, so that
/// neither side's calls can be optimized away. One task uses it at a time.
final class BenchCounter {
    private var value = 0
    private(set) var kept = 0

    func next() -> Int {
        self.value &+= 1
        return self.value
    }

    func keep(_ total: Int) {
        self.kept &+= total
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
