//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import Foundation

/// One case of Tests/Fixtures/webauthn/cases.json: a recorded passkey response, what its recorder
/// passed to verify it, and what it concluded (see the folder's PROVENANCE.md). Shared by the
/// library's tests (WebAuthnTests) and the command line's (FormattestCLITests).
public struct PasskeyRecording: Decodable, CustomStringConvertible, Sendable {
    /// The recorder's verdict.
    public struct Expectation: Decodable, Sendable {
        public let verified: Bool
        public let error: String?
        public let format: String?
        public let signCount: UInt32?
        public let aaguid: String?
        public let credentialId: String?
        public let publicKey: String?
        public let userVerified: Bool?
        public let backupEligible: Bool?
        public let backedUp: Bool?
        public let attestationAnchored: Bool?
    }

    public let name: String
    public let file: String
    /// base64url.
    public let challenge: String
    public let origins: [String]
    public let rpId: String
    /// RFC 3339, registrations only: a time inside every certificate's validity (or after, on purpose).
    public let at: String?
    /// PEM files of Tests/Fixtures/webauthn.
    public let roots: [String]?
    /// The stored COSE key (base64url), assertions only.
    public let publicKey: String?
    public let previousSignCount: UInt32?
    public let requireUserVerification: Bool?
    public let expect: Expectation

    public var description: String { self.name }

    /// Tests/Fixtures/webauthn.
    public static let directory = RealSample.fixturesDirectory.appendingPathComponent("webauthn")

    private struct Manifest: Decodable {
        let registrations: [PasskeyRecording]
        let authentications: [PasskeyRecording]
    }

    private static let manifest: Manifest = {
        // A missing or broken manifest fails every test that uses it, loudly.
        let data = try! Data(contentsOf: Self.directory.appendingPathComponent("cases.json"))
        return try! JSONDecoder().decode(Manifest.self, from: data)
    }()

    /// The registration cases.
    public static var registrations: [PasskeyRecording] { Self.manifest.registrations }
    /// The authentication cases.
    public static var authentications: [PasskeyRecording] { Self.manifest.authentications }

    /// The response file.
    public var url: URL { Self.directory.appendingPathComponent(self.file) }
}
