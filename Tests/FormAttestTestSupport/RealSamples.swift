//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import AppAttest
public import Foundation

/// One recording from a real device (see Tests/Fixtures/appattest/PROVENANCE.md).
public struct RealSample: Sendable, CustomStringConvertible {
    /// The file name without `.json`.
    public let name: String
    /// The attestation object, absent for an assertion-only recording.
    public let attestation: [UInt8]?
    /// The keyId.
    public let keyID: [UInt8]?
    /// `TEAMID.bundleID`.
    public let appID: String
    /// The exact clientDataHash bytes of the attestation.
    public let clientDataHash: [UInt8]?
    /// The challenge text the app hashed (or, for Apple's sample, passed raw).
    public let challenge: String?
    /// The environment the aaguid names.
    public let environment: AppAttestEnvironment?
    /// A time inside the certificates' validity.
    public let validAt: Date?
    /// The key in PEM, when the recording has it.
    public let publicKeyPEM: String?
    /// Assertions signed by the attested key.
    public let assertions: [RealAssertion]

    public var description: String { self.name }

    /// The directory holding the copied fixtures.
    public static let fixturesDirectory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent()
        .deletingLastPathComponent()
        .appendingPathComponent("Fixtures")

    /// Every recording, sorted by name.
    public static func all() throws -> [RealSample] {
        let directory = Self.fixturesDirectory.appendingPathComponent("appattest/samples")
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
            .filter { $0.hasSuffix(".json") }
            .sorted()
        return try names.map { try Self(contentsOf: directory.appendingPathComponent($0)) }
    }

    /// The recordings that carry an attestation.
    public static func withAttestation() throws -> [RealSample] {
        try Self.all().filter { $0.attestation != nil }
    }

    /// One recording by name.
    public static func named(_ name: String) throws -> RealSample {
        try Self(contentsOf: Self.fixturesDirectory.appendingPathComponent("appattest/samples/\(name).json"))
    }

    init(contentsOf url: URL) throws {
        let json = try JSONDecoder().decode(SampleFile.self, from: Data(contentsOf: url))
        self.name = url.deletingPathExtension().lastPathComponent
        self.attestation = try json.attestation_b64.map(Self.base64)
        self.keyID = try json.key_id_b64.map(Self.base64)
        self.appID = json.app_id
        self.clientDataHash = try json.client_data_hash_hex.map(Self.hex)
        self.challenge = json.challenge_utf8
        self.environment = json.environment.flatMap(AppAttestEnvironment.init(rawValue:))
        self.validAt = try json.valid_at.map(Self.date)
        self.publicKeyPEM = json.public_key_pem
        var assertions = try (json.assertions ?? []).map {
            RealAssertion(
                assertion: try Self.base64($0.assertion_b64),
                clientDataHash: try Self.hex($0.client_data_hash_hex),
                clientData: $0.client_data_utf8,
                expectedCounter: $0.expected_counter
            )
        }
        if let standalone = json.assertion_b64, let hash = json.client_data_hash_hex {
            assertions.append(
                RealAssertion(
                    assertion: try Self.base64(standalone),
                    clientDataHash: try Self.hex(hash),
                    clientData: json.client_data_utf8,
                    expectedCounter: nil
                )
            )
        }
        self.assertions = assertions
    }

    private struct SampleFile: Decodable {
        struct Assertion: Decodable {
            var assertion_b64: String
            var client_data_hash_hex: String
            var client_data_utf8: String?
            var expected_counter: UInt32?
        }
        var attestation_b64: String?
        var key_id_b64: String?
        var app_id: String
        var client_data_hash_hex: String?
        var challenge_utf8: String?
        var environment: String?
        var valid_at: String?
        var public_key_pem: String?
        var assertion_b64: String?
        var client_data_utf8: String?
        var assertions: [Assertion]?
    }

    struct FixtureError: Error, CustomStringConvertible {
        var description: String
    }

    static func base64(_ text: String) throws -> [UInt8] {
        guard let data = Data(base64Encoded: text) else { throw FixtureError(description: "bad base64") }
        return Array(data)
    }

    public static func hex(_ text: String) throws -> [UInt8] {
        let digits = Array(text.utf8)
        guard digits.count % 2 == 0 else { throw FixtureError(description: "odd hex") }
        return try stride(from: 0, to: digits.count, by: 2).map { index in
            guard let byte = UInt8(String(decoding: digits[index..<index + 2], as: UTF8.self), radix: 16) else {
                throw FixtureError(description: "bad hex")
            }
            return byte
        }
    }

    static func date(_ text: String) throws -> Date {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withInternetDateTime]
        guard let date = formatter.date(from: text) else { throw FixtureError(description: "bad date \(text)") }
        return date
    }
}

/// An assertion from a real device.
public struct RealAssertion: Sendable {
    public let assertion: [UInt8]
    public let clientDataHash: [UInt8]
    public let clientData: String?
    public let expectedCounter: UInt32?
}
