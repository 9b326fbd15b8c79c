//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

// libFuzzer target over the request pipeline, as the HTTP service runs it: body bytes → the strict
// JSON parse and field decoding the service uses (FormFlows.parseBody, AttestRequest(body:), ...) →
// the form policy → the flows, on a fresh memory store with a simulated device and a pinned time.
// Built by scripts/fuzz through SwiftPM (FORMATTEST_FUZZ=1 adds this target).
//
// Input: the first byte picks the endpoint (0 attest, 1 assert, 2 register-pooled, modulo 3), the
// rest is the HTTP body. Each input runs twice against the same store (a client's retry), and any
// of these is a finding: a trap or a sanitizer report; a decoding error that is not
// `.malformedInput`; a flow error of category `.storeUnavailable` (the memory store never fails); a
// form hash accepted twice in one run; a stored counter that goes down, or a key that disappears;
// an accepted assertion whose counter is not the one stored.
//
// With FORMATTEST_FUZZ_WRITE_SEEDS=DIR the target writes its seeds to DIR (valid bodies for each
// endpoint, checked to be accepted, and hostile variants) and exits 0 without fuzzing.

import AppAttest
import AppAttestSimulator
import CanonicalJSON
import Dispatch
import FormAttestFlows
import FormAttestForm
import Foundation
import FuzzDriver
import RFC3339

// MARK: - The fixture: computed once, copied into a fresh store for every input

/// The endpoints, by the input's first byte.
enum Endpoint: UInt8, CaseIterable, Sendable {
    case attest = 0
    case assert = 1
    case registerPooled = 2

    init(selector: UInt8) { self = Endpoint(rawValue: selector % 3)! }
}

/// Everything that does not change between inputs. Fixed seeds and a fixed time: a seed written
/// once stays valid forever (the simulator's CA is valid 2020–2045; `now` is pinned).
struct Fixture: Sendable {
    static let appID = "ABCDE12345.com.formattest.fuzz"
    /// 2026-11-22T08:00:00Z. Never `Date()`.
    static let now = Date(timeIntervalSince1970: 1_795_341_600)
    static let username = "alice"
    /// The largest body the service reads (AppRequestContext.maxUploadSize).
    static let maximumBodySize = 64 * 1024
    /// A pool challenge and a form challenge, issued to alice in every fresh store.
    static let poolChallenge = [UInt8](repeating: 0x50, count: 32)
    static let formChallenge = [UInt8](repeating: 0xC4, count: 32)

    let authority: SimulatedAttestationAuthority
    let device: SimulatedDevice
    let verifier: AppAttestVerifier
    let configuration: FlowConfiguration
    /// Key 0 of the device, registered to alice with counter 0.
    let registeredKey: StoredKey
    let challenges: [IssuedChallenge]

    /// The registered key; seeds attest key 1 and register key 2 as pooled.
    var registered: SimulatedKey { self.device.key(0) }
    var fresh: SimulatedKey { self.device.key(1) }
    var pooled: SimulatedKey { self.device.key(2) }

    init() {
        do {
            self.authority = try SimulatedAttestationAuthority(seed: 0xF0A2)
            self.device = SimulatedDevice(authority: self.authority, appID: Self.appID, environment: .production, seed: 0x5EED)
            self.verifier = try AppAttestVerifier(
                policy: AppAttestPolicy(
                    appIDs: [Self.appID],
                    environments: [.production],
                    trustAnchors: [self.authority.rootCertificate],
                    receiptTrustAnchors: [self.authority.receiptAuthority.rootCertificate],
                    requireValidReceipt: true
                )
            )
        } catch {
            fatalError("fixture: the simulator did not start: \(error)")
        }
        // Rotation on: every answer, accepted or refused, also issues a challenge (more of the
        // flows' code runs, and the store sees more writes).
        self.configuration = FlowConfiguration(rotateChallenges: true)
        self.challenges = [
            IssuedChallenge(
                value: Self.poolChallenge, purpose: .pool, username: Self.username, issuedAt: Self.now,
                expiresAt: Self.now.addingTimeInterval(self.configuration.poolChallengeLifetime)
            ),
            IssuedChallenge(
                value: Self.formChallenge, purpose: .form, username: Self.username, issuedAt: Self.now,
                expiresAt: Self.now.addingTimeInterval(self.configuration.formChallengeLifetime)
            ),
        ]
        // Register key 0 once through the real flow; each input's store gets a copy of the result.
        let form = Seeds.form(nonce: "fixture-registration")
        let request: FormFlows.AttestRequest
        do {
            request = FormFlows.AttestRequest(
                username: Self.username,
                keyID: self.device.key(0).keyID,
                attestationObject: try self.device.attest(self.device.key(0), clientDataHash: Seeds.hash(form), at: Self.now),
                form: form
            )
        } catch {
            fatalError("fixture: the simulator did not attest: \(error)")
        }
        let store = MemoryAttestationStore()
        let flows = FormFlows(verifier: self.verifier, store: store, configuration: FlowConfiguration())
        let registered = blocking { () async -> Result<StoredKey?, Violation> in
            do {
                _ = try await flows.attest(request, now: Self.now)
                return .success(try await store.loadKey(keyID: request.keyID))
            } catch {
                return .failure(Violation("\(error)"))
            }
        }
        guard case .success(let key?) = registered else {
            fatalError("fixture: the registration of key 0 failed: \(registered)")
        }
        self.registeredKey = key
    }
}

let fixture = Fixture()

// MARK: - Sync → async

/// Written once by the task before it signals, read once by the caller after it waited: the
/// semaphore orders the two accesses.
private final class ResultBox<Value: Sendable>: @unchecked Sendable {
    var value: Value?
}

/// Runs `operation` on the concurrency pool and blocks the calling thread until it returns.
///
/// The caller is libFuzzer's thread (main), never a thread of the cooperative pool, so waiting
/// here cannot starve the task it waits for; the flows and the memory store actor run there.
func blocking<Value: Sendable>(_ operation: @escaping @Sendable () async -> Value) -> Value {
    let box = ResultBox<Value>()
    let done = DispatchSemaphore(value: 0)
    Task.detached {
        box.value = await operation()
        done.signal()
    }
    done.wait()
    guard let value = box.value else { fatalError("the task ended without a value") }
    return value
}

// MARK: - One input

/// What one input did, for the seed check.
enum Verdict: Sendable, Equatable {
    case refusedDecoding(code: String)
    case ran(accepted: Int, codes: [String])
}

/// The body through the pipeline on a fresh store, twice. Returns the verdict, or the first broken
/// invariant.
func execute(_ endpoint: Endpoint, body: [UInt8]) async -> Result<Verdict, Violation> {
    let store = MemoryAttestationStore()
    do throws(StoreError) {
        try await store.insertKey(fixture.registeredKey)
        for challenge in fixture.challenges { try await store.issueChallenge(challenge) }
    } catch {
        return .failure(Violation("the fixture did not load into a fresh store: \(error)"))
    }
    let flows = FormFlows(verifier: fixture.verifier, store: store, configuration: fixture.configuration, randomBytes: RotatingBytes().next)
    /// A stored key (the memory store never fails a read).
    func load(_ keyID: [UInt8]) async -> Result<StoredKey?, Violation> {
        do {
            return .success(try await store.loadKey(keyID: keyID))
        } catch {
            return .failure(Violation("the memory store failed a read: \(error)"))
        }
    }

    // Decoding, as the HTTP service does it before calling a flow.
    let request: DecodedRequest
    do throws(FlowError) {
        let value = try FormFlows.parseBody(body, maximumSize: Fixture.maximumBodySize)
        switch endpoint {
        case .attest: request = .attest(try FormFlows.AttestRequest(body: value))
        case .assert: request = .assert(try FormFlows.AssertRequest(body: value))
        case .registerPooled: request = .registerPooled(try FormFlows.PooledRequest(body: value))
        }
    } catch {
        guard error.category == .malformedInput, ["invalid_json", "invalid_request", "form_inexact_number"].contains(error.code.identifier) else {
            return .failure(Violation("decoding threw \(error.code) (\(error.category)): \(error.reason)"))
        }
        return .success(.refusedDecoding(code: error.code.identifier))
    }

    var acceptedHashes = Set<[UInt8]>()
    var codes: [String] = []
    var counters: [[UInt8]: UInt32] = [:]
    let watched = [fixture.registeredKey.keyID, request.keyID]
    /// Reads the watched keys: none may have lost its counter, or itself, since the last read.
    func readCounters(_ when: String) async -> Violation? {
        for keyID in watched {
            let key: StoredKey?
            switch await load(keyID) {
            case .success(let loaded): key = loaded
            case .failure(let violation): return violation
            }
            if let previous = counters[keyID], key.map({ $0.counter < previous }) ?? true {
                let current = key.map { String($0.counter) } ?? "gone"
                return Violation("\(when): key \(Base64URL.encode(keyID)) went from counter \(previous) to \(current)")
            }
            if let key { counters[keyID] = key.counter }
        }
        return nil
    }
    for attempt in 1...2 {
        if let violation = await readCounters("before attempt \(attempt)") { return .failure(violation) }
        let outcome: (formHash: [UInt8], assertedCounter: UInt32?)
        do throws(FlowError) {
            switch request {
            case .attest(let request):
                let result = try await flows.attest(request, now: Fixture.now)
                outcome = (result.form.clientDataHash, nil)
            case .assert(let request):
                let result = try await flows.assert(request, now: Fixture.now)
                outcome = (result.form.clientDataHash, result.assertion.counter)
            case .registerPooled(let request):
                let result = try await flows.registerPooled(request, now: Fixture.now)
                outcome = (result.form.clientDataHash, nil)
            }
        } catch {
            if error.category == .storeUnavailable {
                return .failure(Violation("attempt \(attempt): \(error.code) (storeUnavailable) from the memory store: \(error.reason)"))
            }
            codes.append(error.code.identifier)
            continue
        }
        codes.append("ok")
        guard acceptedHashes.insert(outcome.formHash).inserted else {
            return .failure(Violation("attempt \(attempt): form hash \(Base64URL.encode(outcome.formHash)) accepted twice"))
        }
        if let asserted = outcome.assertedCounter {
            guard case .success(let key?) = await load(request.keyID), key.counter == asserted else {
                return .failure(Violation("attempt \(attempt): accepted counter \(asserted) is not the stored one"))
            }
            if let previous = counters[request.keyID], asserted <= previous {
                return .failure(Violation("attempt \(attempt): accepted counter \(asserted) is not above the stored \(previous)"))
            }
        }
    }
    if let violation = await readCounters("after attempt 2") { return .failure(violation) }
    return .success(.ran(accepted: acceptedHashes.count, codes: codes))
}

struct Violation: Error, Sendable, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

enum DecodedRequest: Sendable {
    case attest(FormFlows.AttestRequest)
    case assert(FormFlows.AssertRequest)
    case registerPooled(FormFlows.PooledRequest)

    var keyID: [UInt8] {
        switch self {
        case .attest(let request): request.keyID
        case .assert(let request): request.keyID
        case .registerPooled(let request): request.keyID
        }
    }
}

/// Deterministic "random" challenge values, distinct within one input's store.
private final class RotatingBytes: @unchecked Sendable {
    private let lock = NSLock()
    private var counter: UInt8 = 0

    var next: @Sendable (Int) -> [UInt8] {
        { count in
            let value = self.lock.withLock {
                self.counter &+= 1
                return self.counter
            }
            return [UInt8](repeating: value, count: count)
        }
    }
}

// MARK: - libFuzzer's entry points

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    guard size > 0 else { return 0 }
    _ = fixture.registeredKey  // made in LLVMFuzzerInitialize, on this thread, never on the pool
    let endpoint = Endpoint(selector: data[0])
    let body = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    let result = blocking { await execute(endpoint, body: body) }
    if case .failure(let violation) = result {
        fatalError("request pipeline invariant broken (\(endpoint)): \(violation)")
    }
    return 0
}

// LeakSanitizer (part of -sanitize=address): allocations made between these calls, on this thread,
// are never reported. The fixture lives until exit, and some of its references (a P-384 key inside
// a certificate's public-key enum) are stored with tag bits that LeakSanitizer cannot follow.
@_silgen_name("__lsan_disable") func leakSanitizerDisable()
@_silgen_name("__lsan_enable") func leakSanitizerEnable()

/// Called by libFuzzer's driver before anything else (flags, corpus, fuzzing): makes the fixture
/// here, on libFuzzer's thread (never on the pool), and writes the seeds when asked to.
@_cdecl("LLVMFuzzerInitialize")
public func fuzzerInitialize(
    _ argc: UnsafeMutablePointer<Int32>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>
) -> Int32 {
    leakSanitizerDisable()
    _ = fixture.registeredKey
    if let directory = ProcessInfo.processInfo.environment["FORMATTEST_FUZZ_WRITE_SEEDS"], !directory.isEmpty {
        // Left disabled: the process ends here, with whatever the seed run allocated still live.
        exit(Seeds.write(to: directory))
    }
    leakSanitizerEnable()
    return 0
}

// SwiftPM links an executable target's entry point as `<module>_main` (see FuzzDriver).
@_cdecl("FormAttestRequestFuzz_main")
public func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> Int32 {
    FuzzDriver.run(argc, argv) { data, size in fuzz(data, size) }
}

// MARK: - Seeds

enum Seeds {
    /// A transfer form as an app would send it (member order and spacing not canonical).
    /// `fields` are spliced in verbatim (JSON text).
    static func form(
        user: String = #""alice""#,
        timestamp: String = RFC3339UTC.format(Fixture.now),
        nonce: String,
        extra: String = ""
    ) -> [UInt8] {
        Array(#"{ "to": "bob", "amount": "10.00", "username": \#(user), "timestamp": "\#(timestamp)", "nonce": "\#(nonce)"\#(extra) }"#.utf8)
    }

    /// clientDataHash of a form the flows accept as JSON; for any other text, of a valid one (the
    /// signature is then simply for another form).
    static func hash(_ form: [UInt8]) -> [UInt8] {
        if let signed = try? SignedForm(jsonBytes: form) { return signed.clientDataHash }
        guard let fallback = try? SignedForm(jsonBytes: Self.form(nonce: "fallback")) else { fatalError("the fallback form does not parse") }
        return fallback.clientDataHash
    }

    static func string(_ bytes: [UInt8]) -> String { #""\#(Base64URL.encode(bytes))""# }

    /// A body: `members` are (name, JSON text) in order, `form` is JSON text.
    static func body(_ endpoint: Endpoint, _ members: [(String, String)]) -> [UInt8] {
        [endpoint.rawValue] + Array(("{" + members.map { #""\#($0.0)": \#($0.1)"# }.joined(separator: ", ") + "}").utf8)
    }

    /// The three valid bodies and their variants for `form`, signed for it.
    static func bodies(
        form: [UInt8], username: String = #""alice""#, counter: UInt32 = 1, localChallenge: Bool = false
    ) throws -> [(Endpoint, [UInt8])] {
        let device = fixture.device
        let hash = Self.hash(form)
        let formText = String(decoding: form, as: UTF8.self)
        var attest = [
            ("username", username), ("keyId", Self.string(fixture.fresh.keyID)),
            ("attestationObject", Self.string(try device.attest(fixture.fresh, clientDataHash: hash, at: Fixture.now))), ("form", formText),
        ]
        if localChallenge { attest.append(("localChallenge", Self.string(hash))) }
        let assert = [
            ("username", username), ("keyId", Self.string(fixture.registered.keyID)),
            ("assertion", Self.string(try device.assert(fixture.registered, clientDataHash: hash, counter: counter))), ("form", formText),
        ]
        let pooled = [
            ("username", username), ("keyId", Self.string(fixture.pooled.keyID)),
            ("attestationObject", Self.string(try device.attest(fixture.pooled, clientDataHash: Fixture.poolChallenge, at: Fixture.now))),
            ("poolChallenge", Self.string(Fixture.poolChallenge)),
            ("assertion", Self.string(try device.assert(fixture.pooled, clientDataHash: hash, counter: counter))), ("form", formText),
        ]
        return [(.attest, Self.body(.attest, attest)), (.assert, Self.body(.assert, assert)), (.registerPooled, Self.body(.registerPooled, pooled))]
    }

    static func name(_ endpoint: Endpoint) -> String {
        switch endpoint {
        case .attest: "attest"
        case .assert: "assert"
        case .registerPooled: "pooled"
        }
    }

    /// Accepted at the first attempt, and only then.
    static func acceptedOnce(_ verdict: Verdict) -> Bool {
        guard case .ran(accepted: 1, let codes) = verdict else { return false }
        return codes.first == "ok"
    }

    /// Writes the seeds to `directory`; 0 when every valid seed was accepted.
    static func write(to directory: String) -> Int32 {
        var seeds: [(name: String, bytes: [UInt8], mustAccept: Bool)] = []
        let ts = RFC3339UTC.format(Fixture.now, fractionDigits: 0)
        let base = String(ts.dropLast())  // without the Z
        do {
            // Valid: each endpoint accepts these (checked below).
            for (endpoint, body) in try Self.bodies(form: Self.form(nonce: "seed-valid")) {
                seeds.append(("\(Self.name(endpoint))-valid", body, true))
            }
            let challenged = Self.form(nonce: "seed-challenge", extra: #", "challenge": \#(Self.string(Fixture.formChallenge))"#)
            for (endpoint, body) in try Self.bodies(form: challenged, localChallenge: true) {
                seeds.append(("\(Self.name(endpoint))-valid-challenge", body, true))
            }
            // Hostile forms: times, numbers, usernames.
            let fullwidth = String(base.map { $0.isASCII && $0.isNumber ? Character(UnicodeScalar($0.unicodeScalars.first!.value + 0xFEE0)!) : $0 })
            let hostileForms: [(String, [UInt8])] = [
                ("timestamp-35-fraction-digits", Self.form(timestamp: base + "." + String(repeating: "1234567", count: 5) + "Z", nonce: "h1")),
                ("timestamp-offset-and-z", Self.form(timestamp: base + "+01:00Z", nonce: "h2")),
                ("timestamp-offset", Self.form(timestamp: base + "+01:00", nonce: "h3")),
                ("timestamp-fullwidth-digits", Self.form(timestamp: fullwidth + "Z", nonce: "h4")),
                ("timestamp-leap-second", Self.form(timestamp: String(base.dropLast(2)) + "60Z", nonce: "h5")),
                ("number-2^53+1", Self.form(nonce: "h6", extra: #", "cents": 9007199254740993"#)),
                ("number-0.3-plus-1e-20", Self.form(nonce: "h7", extra: #", "rate": 0.30000000000000000001"#)),
                ("number-underflow", Self.form(nonce: "h8", extra: #", "tiny": 1e-400"#)),
                ("form-username-nul", Self.form(user: #""alice\u0000evil""#, nonce: "h9")),
                ("form-username-escape", Self.form(user: #""alice\u001b[31m""#, nonce: "h10")),
                ("form-duplicate-timestamp", Array(#"{"timestamp": "\#(ts)", "timestamp": "\#(ts)", "username": "alice", "nonce": "h11"}"#.utf8)),
                ("form-lone-surrogate", Self.form(nonce: "h12", extra: #", "note": "\ud800""#)),
            ]
            for (label, form) in hostileForms {
                for (endpoint, body) in try Self.bodies(form: form) {
                    seeds.append(("\(Self.name(endpoint))-\(label)", body, false))
                }
            }
            // Hostile usernames (the request's and the form's alike).
            let usernames: [(String, String)] = [
                ("nul", #""alice\u0000""#), ("newline", #""alice\nbob""#), ("escape", #""\u001b]0;x\u0007alice""#),
                ("delete", #""alice\u007f""#), ("c1-next-line", #""alice\u0085""#), ("empty", #""""#),
                ("too-long", "\"" + String(repeating: "a", count: 257) + "\""), ("number", "7"),
            ]
            for (label, username) in usernames {
                for (endpoint, body) in try Self.bodies(form: Self.form(user: username, nonce: "u-\(label)"), username: username) {
                    seeds.append(("\(Self.name(endpoint))-username-\(label)", body, false))
                }
            }
            // Counters: the same counter as stored (0), and a huge one.
            for (endpoint, body) in try Self.bodies(form: Self.form(nonce: "c0"), counter: 0) where endpoint != .attest {
                seeds.append(("\(Self.name(endpoint))-counter-0", body, false))
            }
            for (endpoint, body) in try Self.bodies(form: Self.form(nonce: "cmax"), counter: .max) where endpoint != .attest {
                seeds.append(("\(Self.name(endpoint))-counter-max", body, true))
            }
        } catch {
            FileHandle.standardError.write(Data("seeds: the simulator failed: \(error)\n".utf8))
            return 1
        }
        // Bodies that are not the flows' shape at all.
        for endpoint in Endpoint.allCases {
            let name = Self.name(endpoint)
            seeds.append(("\(name)-deep-array", [endpoint.rawValue] + [UInt8](repeating: UInt8(ascii: "["), count: 10_000), false))
            let deepForm = Array(#"{"username": "alice", "form": "#.utf8) + [UInt8](repeating: UInt8(ascii: "["), count: 10_000)
            seeds.append(("\(name)-deep-form", [endpoint.rawValue] + deepForm, false))
            seeds.append(("\(name)-not-object", [endpoint.rawValue] + Array(#"["username", "alice"]"#.utf8), false))
            seeds.append(("\(name)-empty", [endpoint.rawValue], false))
        }

        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            FileHandle.standardError.write(Data("seeds: cannot create \(directory): \(error)\n".utf8))
            return 1
        }
        var failures = 0
        for seed in seeds {
            // Every seed passes the invariants, and a valid one is accepted (once: the retry is refused).
            let result = blocking { await execute(Endpoint(selector: seed.bytes[0]), body: Array(seed.bytes.dropFirst())) }
            switch result {
            case .failure(let violation):
                FileHandle.standardError.write(Data("seeds: \(seed.name) breaks an invariant: \(violation)\n".utf8))
                failures += 1
            case .success(let verdict):
                FileHandle.standardError.write(Data("seeds: \(seed.name): \(verdict)\n".utf8))
                if seed.mustAccept, !Self.acceptedOnce(verdict) {
                    FileHandle.standardError.write(Data("seeds: \(seed.name) was not accepted: \(verdict)\n".utf8))
                    failures += 1
                }
            }
            let url = URL(fileURLWithPath: directory).appendingPathComponent(seed.name)
            do {
                try Data(seed.bytes).write(to: url)
            } catch {
                FileHandle.standardError.write(Data("seeds: cannot write \(url.path): \(error)\n".utf8))
                return 1
            }
        }
        FileHandle.standardError.write(Data("seeds: wrote \(seeds.count) to \(directory)\n".utf8))
        return failures == 0 ? 0 : 1
    }
}
