//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Crypto
public import Foundation
import SwiftASN1
import X509

/// Where a deployment keeps its ``PackedAttestationAuthority``: `root.pem` and
/// `attestation.pem` (certificates), `attestation-key.pem` and `root-key.pem` (private keys,
/// 0600, in a 0700 directory). The root's key is needed only to issue a new attestation
/// certificate: move it offline once the authority is generated.
public struct PackedAttestationAuthorityDirectory: Sendable {
    public let directory: URL

    public init(directory: URL) {
        self.directory = directory
    }

    var rootFile: URL { self.directory.appendingPathComponent("root.pem") }
    var rootKeyFile: URL { self.directory.appendingPathComponent("root-key.pem") }
    var attestationFile: URL { self.directory.appendingPathComponent("attestation.pem") }
    var attestationKeyFile: URL { self.directory.appendingPathComponent("attestation-key.pem") }

    /// Generates and saves a new authority; refuses to replace an existing one.
    @discardableResult
    public func generate(organization: String, country: String, now: Date = Date()) throws -> PackedAttestationAuthority {
        guard !FileManager.default.fileExists(atPath: self.rootFile.path) else {
            throw AuthorityError("an attestation authority exists in \(self.directory.path) already")
        }
        let (authority, rootKey) = try PackedAttestationAuthority.generate(organization: organization, country: country, now: now)
        try FileManager.default.createDirectory(at: self.directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try SigningKeyDirectory.writePrivate(rootKey.pemRepresentation, to: self.rootKeyFile)
        try SigningKeyDirectory.writePrivate(authority.attestationKey.pemRepresentation, to: self.attestationKeyFile)
        try Data(try authority.attestationCertificate.serializeAsPEM().pemString.utf8).write(to: self.attestationFile, options: .atomic)
        try Data(try authority.rootCertificate.serializeAsPEM().pemString.utf8).write(to: self.rootFile, options: .atomic)
        return authority
    }

    /// Loads the authority (its certificates and the attestation key; never the root's key).
    public func load() throws -> PackedAttestationAuthority {
        func text(_ url: URL) throws -> String {
            guard let text = try? String(contentsOf: url, encoding: .utf8) else { throw AuthorityError("cannot read \(url.path)") }
            return text
        }
        return PackedAttestationAuthority(
            rootCertificate: try Certificate(pemEncoded: try text(self.rootFile)),
            attestationCertificate: try Certificate(pemEncoded: try text(self.attestationFile)),
            attestationKey: try P256.Signing.PrivateKey(pemRepresentation: try text(self.attestationKeyFile))
        )
    }

    public struct AuthorityError: Error, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }
}
