//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Crypto
public import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The signing keys' files in the data directory (an adapter: it reads and writes files).
///
/// - `signing-key.pem`: the current private key (PKCS#8 PEM), mode 0600.
/// - `signing-key.previous.pem`: public keys of earlier keys, still published in the JWKS.
public struct SigningKeyDirectory: Sendable {
    public let directory: URL

    public init(directory: URL) {
        self.directory = directory
    }

    public var currentKeyFile: URL { self.directory.appendingPathComponent("signing-key.pem") }
    public var previousKeysFile: URL { self.directory.appendingPathComponent("signing-key.previous.pem") }

    /// Loads the keys, generating (and saving, mode 0600) a current key on first use.
    public func loadOrCreate() throws -> SigningKeys {
        if !FileManager.default.fileExists(atPath: self.currentKeyFile.path) {
            try self.write(current: P256.Signing.PrivateKey(), previous: try self.previousKeys())
        }
        return try self.load()
    }

    /// Loads the keys; the current key must exist.
    public func load() throws -> SigningKeys {
        let pem = try String(contentsOf: self.currentKeyFile, encoding: .utf8)
        return SigningKeys(current: try P256.Signing.PrivateKey(pemRepresentation: pem), previous: try self.previousKeys())
    }

    /// Replaces the current key with a new one; the old one's public key stays published.
    @discardableResult
    public func rotate() throws -> SigningKeys {
        let old = try self.loadOrCreate()
        try self.write(current: P256.Signing.PrivateKey(), previous: [old.current.publicKey] + old.previous)
        return try self.load()
    }

    /// Uses a key from a PEM file (as the current key) instead of the directory's.
    public static func load(privateKeyPEM path: String) throws -> SigningKeys {
        SigningKeys(current: try P256.Signing.PrivateKey(pemRepresentation: String(contentsOfFile: path, encoding: .utf8)))
    }

    private func previousKeys() throws -> [P256.Signing.PublicKey] {
        guard let text = try? String(contentsOf: self.previousKeysFile, encoding: .utf8) else { return [] }
        return try text.components(separatedBy: "-----END PUBLIC KEY-----")
            .map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
            .filter { !$0.isEmpty }
            .map { try P256.Signing.PublicKey(pemRepresentation: $0 + "\n-----END PUBLIC KEY-----") }
    }

    private func write(current: P256.Signing.PrivateKey, previous: [P256.Signing.PublicKey]) throws {
        // Owner-only (0700): it holds the signing keys (each file 0600).
        try FileManager.default.createDirectory(at: self.directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try Self.writePrivate(current.pemRepresentation, to: self.currentKeyFile)
        try Data(previous.map { $0.pemRepresentation + "\n" }.joined().utf8).write(to: self.previousKeysFile, options: .atomic)
    }

    /// Writes a secret readable by the owner alone: the temporary file is created 0600 before
    /// the key is written into it, then renamed into place.
    static func writePrivate(_ text: String, to url: URL) throws {
        let temporary = url.deletingLastPathComponent().appendingPathComponent(".\(url.lastPathComponent).\(UUID().uuidString)")
        guard FileManager.default.createFile(atPath: temporary.path, contents: nil, attributes: [.posixPermissions: 0o600]) else {
            throw CocoaError(.fileWriteNoPermission)
        }
        do {
            let handle = try FileHandle(forWritingTo: temporary)
            try handle.write(contentsOf: Data(text.utf8))
            try handle.close()
            // rename(2) replaces the old key atomically: a reader sees the old or the new key.
            guard rename(temporary.path, url.path) == 0 else { throw CocoaError(.fileWriteUnknown) }
        } catch {
            try? FileManager.default.removeItem(at: temporary)
            throw error
        }
    }
}
