//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import Crypto
import Foundation
import Testing

/// The iOS 27 / macOS 27 signals and their policy: every policy accepts a genuine attestation or
/// assertion that satisfies it and refuses the same one with one signal changed, on attestations
/// and on assertions (AT set and clear, both key spellings).
struct SignalPolicyTests {
    static let cdHash = Array(SHA256.hash(data: Array("the bank's release build".utf8)))
    static var otherCDHash: [UInt8] {
        var hash = Self.cdHash
        hash[31] ^= 0x01
        return hash
    }

    /// Where the signals travel.
    enum Shape: String, CaseIterable, CustomStringConvertible, Sendable {
        case attestationApple, attestationDocumentation
        case assertionATApple, assertionATDocumentation, assertionNoATApple, assertionNoATDocumentation

        var description: String { self.rawValue }
        var spelling: SimulatedSignals.Spelling {
            switch self {
            case .attestationApple, .assertionATApple, .assertionNoATApple: .apple
            default: .documentation
            }
        }
        var isAttestation: Bool { self == .attestationApple || self == .attestationDocumentation }
        var assertionFlags: UInt8 { self == .assertionNoATApple || self == .assertionNoATDocumentation ? 0x00 : 0x40 }
    }

    /// Verifies a genuine attestation or assertion carrying `signals` (`nil`: no map) under `configure`.
    @discardableResult
    static func verify(
        _ signals: SimulatedSignals?,
        shape: Shape,
        _ configure: (inout AppAttestPolicy) -> Void
    ) async throws -> AuthenticatorExtensions? {
        let scenario = try SimulatedScenario()
        let verifier = try scenario.verifier(configure)
        var signals = signals
        signals?.spelling = shape.spelling
        let map = signals?.extensionMap ?? []
        if shape.isAttestation {
            return try await scenario.verify(verifier: verifier) { $0.authenticatorDataSuffix = map }.extensions
        }
        return try scenario.verifyAssertion(verifier: verifier) {
            $0.flags = shape.assertionFlags
            $0.authenticatorDataSuffix = map
        }.extensions
    }

    static func expect(_ code: AppAttestError.Code, sourceLocation: SourceLocation = #_sourceLocation, _ body: () async throws -> Void) async {
        do {
            try await body()
            Issue.record("expected \(code), nothing was thrown", sourceLocation: sourceLocation)
        } catch let error as AppAttestError {
            #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        } catch {
            Issue.record("expected \(code), got \(error)", sourceLocation: sourceLocation)
        }
    }

    /// One policy, signals it accepts, and the same with one change that it refuses.
    struct PolicyCase: Sendable, CustomStringConvertible {
        let description: String
        let configure: @Sendable (inout AppAttestPolicy) -> Void
        let accepted: SimulatedSignals
        /// The one change; `nil` signals: no map at all.
        let refused: SimulatedSignals?
        let code: AppAttestError.Code
    }

    static let policies: [PolicyCase] = [
        PolicyCase(
            description: "accepted validation categories",
            configure: { $0.validationCategories = .only([.appStore, .testFlight]) },
            accepted: SimulatedSignals(validationCategory: .testFlight),
            refused: SimulatedSignals(validationCategory: .development),
            code: .validationCategoryNotAllowed
        ),
        PolicyCase(
            description: "minimum bundle version",
            configure: { $0.minimumBundleVersion = BundleVersion("2.3") },
            accepted: SimulatedSignals(bundleVersion: "2.10"),
            refused: SimulatedSignals(bundleVersion: "2.2.9"),
            code: .bundleVersionTooOld
        ),
        PolicyCase(
            description: "allowed CDHashes",
            configure: { $0.allowedCDHashes = AppAttestPolicy.CDHashAllowList([SignalPolicyTests.cdHash]) },
            accepted: SimulatedSignals(cdHash: SignalPolicyTests.cdHash),
            refused: SimulatedSignals(cdHash: SignalPolicyTests.otherCDHash),
            code: .cdHashNotAllowed
        ),
        PolicyCase(
            description: "allowed CDHashes by bundle version",
            configure: {
                $0.allowedCDHashes = AppAttestPolicy.CDHashAllowList(byBundleVersion: [BundleVersion("2.0")!: [SignalPolicyTests.cdHash]])
            },
            accepted: SimulatedSignals(bundleVersion: "2.0.0", cdHash: SignalPolicyTests.cdHash),
            refused: SimulatedSignals(bundleVersion: "2.1", cdHash: SignalPolicyTests.cdHash),
            code: .cdHashNotAllowed
        ),
        PolicyCase(
            description: "require the CDHash",
            configure: { $0.requireCDHash = true },
            accepted: SimulatedSignals(cdHash: SignalPolicyTests.cdHash),
            refused: SimulatedSignals(),
            code: .cdHashNotAllowed
        ),
        PolicyCase(
            description: "require the iOS 27 signals (one missing)",
            configure: { $0.requireExtensions = true },
            accepted: SimulatedSignals(),
            refused: SimulatedSignals(bundleVersion: nil),
            code: .extensionsRequired
        ),
        PolicyCase(
            description: "require the iOS 27 signals (no map)",
            configure: { $0.requireExtensions = true },
            accepted: SimulatedSignals(),
            refused: nil,
            code: .extensionsRequired
        ),
    ]

    @Test("each policy: accepted as configured, refused with one signal changed", arguments: policies, Shape.allCases)
    func policy(_ policy: PolicyCase, shape: Shape) async throws {
        let extensions = try await Self.verify(policy.accepted, shape: shape, policy.configure)
        #expect(extensions?.hasSignals == true)
        await Self.expect(policy.code) { try await Self.verify(policy.refused, shape: shape, policy.configure) }
    }

    @Test(
        "a restricting policy without require-extensions accepts what carries no map (devices before iOS 27, live assertions without it)",
        arguments: policies.filter { !$0.description.hasPrefix("require") },
        Shape.allCases
    )
    func absentSignalsAccepted(_ policy: PolicyCase, shape: Shape) async throws {
        #expect(try await Self.verify(nil, shape: shape, policy.configure) == nil)
        // And a map without that signal (only an unknown entry).
        var unrelated = SimulatedSignals(validationCategory: nil, bundleVersion: nil)
        unrelated.extraEntries = [("future_signal_02", .integer(1))]
        #expect(try await Self.verify(unrelated, shape: shape, policy.configure)?.hasSignals == false)
    }

    @Test("the typed signals are exposed from either spelling, on attestations and assertions", arguments: Shape.allCases)
    func exposed(shape: Shape) async throws {
        let extensions = try #require(
            try await Self.verify(SimulatedSignals(validationCategory: .appStore, bundleVersion: "3.1.4", cdHash: Self.cdHash), shape: shape) { _ in }
        )
        #expect(extensions.validationCategory == .appStore)
        #expect(extensions.validationCategory?.name == "app-store")
        #expect(extensions.bundleVersion == "3.1.4")
        #expect(extensions.parsedBundleVersion == BundleVersion("3.1.4"))
        #expect(extensions.cdHash == Self.cdHash)
        #expect(extensions.cdHashType == 2)
        #expect(extensions.additionalEntries.isEmpty)
    }

    // MARK: - Reading the signals

    @Test("both spellings with the same values are read once; disagreeing ones are malformed", arguments: Shape.allCases)
    func bothSpellings(shape: Shape) async throws {
        var both = SimulatedSignals(validationCategory: .appStore, bundleVersion: "7")
        both.spelling = .both
        let scenario = try SimulatedScenario()
        let map = both.extensionMap
        let read: AuthenticatorExtensions?
        if shape.isAttestation {
            read = try await scenario.verify { $0.authenticatorDataSuffix = map }.extensions
        } else {
            read = try scenario.verifyAssertion {
                $0.authenticatorDataSuffix = map; $0.flags = shape.assertionFlags
            }.extensions
        }
        #expect(read?.validationCategory == .appStore)
        #expect(read?.bundleVersion == "7")

        // The other spelling than the shape's, with another value.
        let apple = shape.spelling == .apple
        for (key, value) in [
            (
                apple ? AuthenticatorExtensions.validationCategoryShortKey : AuthenticatorExtensions.validationCategoryKey,
                SimulatedSignals.SimulatedValue.bytes([2, 0, 0, 0])
            ),
            (apple ? AuthenticatorExtensions.bundleVersionShortKey : AuthenticatorExtensions.bundleVersionKey, .text("8")),
        ] {
            var disagreeing = SimulatedSignals(validationCategory: .appStore, bundleVersion: "7")
            disagreeing.extraEntries = [(key, value)]
            await Self.expect(.malformedAuthenticatorData) { try await Self.verify(disagreeing, shape: shape) { _ in } }
        }
    }

    /// One way to make a signal unreadable.
    struct Unreadable: Sendable, CustomStringConvertible {
        let description: String
        let change: @Sendable (inout SimulatedSignals) -> Void
    }

    static let unreadableSignals: [Unreadable] = [
        Unreadable(description: "category of 3 bytes") { $0.validationCategory = [4, 0, 0] },
        Unreadable(description: "category of 5 bytes") { $0.validationCategory = [4, 0, 0, 0, 0] },
        Unreadable(description: "empty bundle version") { $0.bundleVersion = "" },
        Unreadable(description: "CDHash without its type") {
            $0.cdHash = SignalPolicyTests.cdHash
            $0.cdHashType = nil
        },
        Unreadable(description: "CDHash type without the hash") { $0.cdHashType = [2] },
        Unreadable(description: "CDHash type of 5 bytes") {
            $0.cdHash = SignalPolicyTests.cdHash
            $0.cdHashType = [2, 0, 0, 0, 0]
        },
        Unreadable(description: "CDHash of 65 bytes") {
            $0.cdHash = [UInt8](repeating: 7, count: 65)
            $0.cdHashType = [2]
        },
        Unreadable(description: "CDHash as text") {
            $0.extraEntries = [(AuthenticatorExtensions.cdHashKey, .text("ab")), (AuthenticatorExtensions.cdHashTypeKey, .bytes([2]))]
        },
    ]

    @Test("a signal that cannot be read is malformed, with or without a policy", arguments: unreadableSignals)
    func unreadable(_ unreadable: Unreadable) async throws {
        var signals = SimulatedSignals()
        unreadable.change(&signals)
        for shape in [Shape.attestationApple, .assertionATApple, .assertionNoATDocumentation] {
            await Self.expect(.malformedAuthenticatorData) { try await Self.verify(signals, shape: shape) { _ in } }
            // Fail closed under a restricting policy too.
            await Self.expect(.malformedAuthenticatorData) {
                try await Self.verify(signals, shape: shape) { $0.validationCategories = .only([.appStore]) }
            }
        }
    }

    @Test("a category outside the published list is kept as its number, and refused by a list that lacks it")
    func unknownCategory() async throws {
        let signals = SimulatedSignals(validationCategory: ValidationCategory(rawValue: 11))
        let extensions = try await Self.verify(signals, shape: .assertionATApple) { _ in }
        #expect(extensions?.validationCategory?.rawValue == 11)
        #expect(extensions?.validationCategory?.name == nil)
        #expect(extensions?.validationCategory?.description == "11")
        await Self.expect(.validationCategoryNotAllowed) {
            try await Self.verify(signals, shape: .assertionATApple) {
                $0.validationCategories = .only(Set(ValidationCategory.named.map(\.category)))
            }
        }
        #expect(
            try await Self.verify(signals, shape: .assertionATApple) { $0.validationCategories = .only([ValidationCategory(rawValue: 11)]) } != nil)
    }

    @Test("a CDHash type may be an unsigned integer; a type other than SHA-256 is refused by an allow list (fail closed)")
    func cdHashTypes() async throws {
        var integerType = SimulatedSignals()
        integerType.extraEntries = [(AuthenticatorExtensions.cdHashKey, .bytes(Self.cdHash)), (AuthenticatorExtensions.cdHashTypeKey, .integer(2))]
        let extensions = try await Self.verify(integerType, shape: .attestationApple) { $0.allowedCDHashes = .init([Self.cdHash]) }
        #expect(extensions?.cdHashType == 2)

        var sha1 = SimulatedSignals(cdHash: Self.cdHash)
        sha1.cdHashType = [1]
        #expect(try await Self.verify(sha1, shape: .assertionATApple) { _ in }?.cdHashType == 1)
        #expect(try await Self.verify(sha1, shape: .assertionATApple) { $0.requireCDHash = true }?.cdHash == Self.cdHash)
        await Self.expect(.cdHashNotAllowed) { try await Self.verify(sha1, shape: .assertionATApple) { $0.allowedCDHashes = .init([Self.cdHash]) } }
    }

    @Test("a bundle version that is not dot-separated digits is exposed, and refused by a minimum (fail closed)")
    func uncomparableBundleVersion() async throws {
        let signals = SimulatedSignals(bundleVersion: "1.0b3")
        #expect(try await Self.verify(signals, shape: .assertionATDocumentation) { _ in }?.bundleVersion == "1.0b3")
        await Self.expect(.bundleVersionTooOld) {
            try await Self.verify(signals, shape: .assertionATDocumentation) { $0.minimumBundleVersion = BundleVersion("1") }
        }
        // A CDHash allowed only for a bundle version cannot match an uncomparable one.
        var hashed = signals
        hashed.cdHash = Self.cdHash
        hashed.cdHashType = [2]
        await Self.expect(.cdHashNotAllowed) {
            try await Self.verify(hashed, shape: .attestationApple) {
                $0.allowedCDHashes = .init(byBundleVersion: [BundleVersion("1.0")!: [Self.cdHash]])
            }
        }
    }

    // MARK: - macOS 27: the key's access control

    @Test("macOS 27: the access-control extension is exposed; a required value accepts it exactly")
    func accessControl() async throws {
        let scenario = try SimulatedScenario()
        let acl = SimulatedDevice.sampleAccessControl
        let exact = try scenario.verifier { $0.requiredAccessControl = acl }
        let result = try await scenario.verify(verifier: exact) { $0.accessControl = acl }
        #expect(result.accessControl == acl)
        #expect(try await scenario.verify().accessControl == nil)

        var changed = acl
        changed[changed.count - 1] ^= 0x01
        await Self.expect(.accessControlMismatch) { try await scenario.verify(verifier: exact) { $0.accessControl = changed } }
        await Self.expect(.accessControlMismatch) { try await scenario.verify(verifier: exact) }
        // Assertions carry no certificate: the requirement does not apply to them.
        #expect(try scenario.verifyAssertion(verifier: exact).counter == 1)
    }

    @Test("the macOS 27 profile sends the map and the access control; the assertion carries the map")
    func macOSProfile() async throws {
        let scenario = try SimulatedScenario()
        var device = scenario.device
        device.profile = .macOS27(SimulatedSignals(validationCategory: .developerID, bundleVersion: "5", cdHash: Self.cdHash))
        let verifier = try scenario.verifier {
            $0.validationCategories = .only([.developerID])
            $0.allowedCDHashes = .init([Self.cdHash])
            $0.requireCDHash = true
            $0.requireExtensions = true
            $0.requiredAccessControl = SimulatedDevice.sampleAccessControl
        }
        let attestation = try device.attest(scenario.key, clientDataHash: scenario.clientDataHash, at: SimulatedScenario.time)
        let verified = try await verifier.verifyAttestation(
            attestation, keyID: scenario.key.keyID, clientDataHash: scenario.clientDataHash, at: SimulatedScenario.time)
        #expect(verified.accessControl == SimulatedDevice.sampleAccessControl)
        #expect(verified.extensions?.validationCategory == .developerID)
        let assertion = try device.assert(scenario.key, clientDataHash: scenario.clientDataHash, counter: 1)
        let asserted = try verifier.verifyAssertion(
            assertion, publicKey: scenario.key.publicKey, clientDataHash: scenario.clientDataHash, previousCounter: 0)
        #expect(asserted.extensions?.cdHash == Self.cdHash)
        #expect(asserted.authenticatorData.flags == .attestedCredentialData)

        // An iOS 27 device whose assertions come without the map: accepted unless the signals are required.
        device.profile = .iOS27(SimulatedSignals(validationCategory: .developerID, bundleVersion: "5", cdHash: Self.cdHash))
        device.profile.assertionsCarrySignals = false
        let bare = try device.assert(scenario.key, clientDataHash: scenario.clientDataHash, counter: 2)
        let lenient = try scenario.verifier { $0.validationCategories = .only([.developerID]) }
        #expect(
            try lenient.verifyAssertion(bare, publicKey: scenario.key.publicKey, clientDataHash: scenario.clientDataHash, previousCounter: 1)
                .extensions == nil)
        #expect(throws: AppAttestError(code: .extensionsRequired, reason: "")) {
            try verifier.verifyAssertion(bare, publicKey: scenario.key.publicKey, clientDataHash: scenario.clientDataHash, previousCounter: 1)
        }
    }

    // MARK: - Values

    @Test("validation categories: names and numbers in, names out; the wire form is 4 bytes little-endian")
    func categories() {
        #expect(ValidationCategory(argument: "app-store") == .appStore)
        #expect(ValidationCategory(argument: "4") == .appStore)
        #expect(ValidationCategory(argument: "testflight") == .testFlight)
        #expect(ValidationCategory(argument: "4294967295")?.rawValue == .max)
        for bad in ["", "App-Store", "4294967296", "-1", "+4", " 4", "0x4", "appstore"] {
            #expect(ValidationCategory(argument: bad) == nil, "\(bad)")
        }
        #expect(ValidationCategory(littleEndianBytes: [4, 0, 0, 0]) == .appStore)
        #expect(ValidationCategory(littleEndianBytes: [0, 0, 0, 1])?.rawValue == 1 << 24)
        #expect(ValidationCategory(littleEndianBytes: [4, 0, 0]) == nil)
        #expect(ValidationCategory.appStore.littleEndianBytes == [4, 0, 0, 0])
        #expect(ValidationCategory.named.map(\.category.rawValue) == [0, 1, 2, 3, 4, 5, 6, 10])
        #expect(ValidationCategory.enterprise.description == "5 (enterprise)")
    }

    @Test("bundle versions compare numerically, component by component")
    func bundleVersions() throws {
        func v(_ text: String) throws -> BundleVersion { try #require(BundleVersion(text)) }
        #expect(try v("1.10") > v("1.9"))
        #expect(try v("2") == v("2.0.0"))
        #expect(try v("2.0.1") > v("2"))
        #expect(try v("10") > v("9.99.99"))
        #expect(try v("007") == v("7"))
        #expect(Set([try v("1.2"), try v("1.2.0")]).count == 1)
        for bad in ["", ".", "1.", ".1", "1..2", "1.0b3", "1,2", " 1", "1 ", "-1", "1234567890123456789", String(repeating: "1.", count: 16) + "1"] {
            #expect(BundleVersion(bad) == nil, "\(bad)")
        }
    }
}
