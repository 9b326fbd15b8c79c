//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Crypto
public import Foundation
import SwiftASN1

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The signing keys' files in the data directory (an adapter: it reads and writes files).
///
/// - `signing-key.pem`: the current private key (PKCS#8 PEM), mode 0600.
/// - `signing-key.previous.pem`: the public key of the previous key, still published in the JWKS.
public struct SigningKeyDirectory: Sendable {
    public let directory: URL

    public init(directory: URL) {
        self.directory = directory
    }

    public var currentKeyFile: URL { self.directory.appendingPathComponent("signing-key.pem") }
    public var previousKeysFile: URL { self.directory.appendingPathComponent("signing-key.previous.pem") }

    /// Loads the keys, generating (and saving, mode 0600) a current key on first use. For the
    /// service's start only: the CLI's commands that read keys use ``load()``, which never creates.
    public func loadOrCreate() throws -> SigningKeys {
        if !FileManager.default.fileExists(atPath: self.currentKeyFile.path) {
            try self.write(current: P256.Signing.PrivateKey(), previous: try self.previousKeys())
        }
        return try self.load()
    }

    /// Loads the keys; the current key must exist.
    ///
    /// - Throws: ``SigningKeyError`` naming the file when there is no key, or it cannot be read
    ///   or is not a P-256 private key.
    public func load() throws(SigningKeyError) -> SigningKeys {
        guard FileManager.default.fileExists(atPath: self.currentKeyFile.path) else {
            throw SigningKeyError(
                "no signing key in \(self.directory.path) (\(self.currentKeyFile.lastPathComponent) does not exist)", isMissing: true)
        }
        return SigningKeys(current: try Self.readPrivateKey(self.currentKeyFile.path), previous: try self.previousKeys())
    }

    /// Replaces the current key with a new one; the old one's public key stays published as the
    /// previous key (one only: the JWKS holds the current and the previous key).
    @discardableResult
    public func rotate() throws -> SigningKeys {
        let old = try self.loadOrCreate()
        try self.write(current: P256.Signing.PrivateKey(), previous: [old.current.publicKey])
        return try self.load()
    }

    /// Uses a key from a PEM file (as the current key) instead of the directory's.
    ///
    /// - Throws: ``SigningKeyError``, one line naming `path`.
    public static func load(privateKeyPEM path: String) throws(SigningKeyError) -> SigningKeys {
        SigningKeys(current: try Self.readPrivateKey(path))
    }

    /// Writes a new P-256 key to `path` (PKCS#8 PEM, mode 0600) and returns it. An existing file
    /// is replaced only when `overwrite` is true; otherwise it is refused and left as it was.
    public static func generate(privateKeyPEM path: String, overwrite: Bool) throws(SigningKeyError) -> SigningKeys {
        let key = P256.Signing.PrivateKey()
        let url = URL(fileURLWithPath: path)
        if overwrite {
            do {
                try Self.writePrivate(key.pemRepresentation, to: url)
            } catch {
                throw SigningKeyError("cannot write \(path)")
            }
        } else {
            // O_EXCL: the file is created here or not at all; an existing one is never touched.
            let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
            guard descriptor >= 0 else {
                throw SigningKeyError(
                    errno == EEXIST ? "\(path) exists; it is not overwritten (add --overwrite to replace it)" : "cannot create \(path)"
                )
            }
            let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
            do {
                try handle.write(contentsOf: Data(key.pemRepresentation.utf8))
                try handle.close()
            } catch {
                unlink(path)
                throw SigningKeyError("cannot write \(path)")
            }
        }
        return SigningKeys(current: key)
    }

    /// The PEM private key at `path`, or a one-line error naming it.
    static func readPrivateKey(_ path: String) throws(SigningKeyError) -> P256.Signing.PrivateKey {
        guard FileManager.default.fileExists(atPath: path) else {
            throw SigningKeyError("\(path) does not exist", isMissing: true)
        }
        guard let data = FileManager.default.contents(atPath: path), data.count <= 64 * 1024 else {
            throw SigningKeyError("\(path) cannot be read (or is larger than 64 KiB)")
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw SigningKeyError("\(path) is not PEM text")
        }
        return try SigningKeyPEM.privateKey(pem: text, source: path)
    }

    /// The most recent earlier key, when there is one (the file may hold older ones, written
    /// before rotation kept one only: they are no longer published).
    private func previousKeys() throws(SigningKeyError) -> [P256.Signing.PublicKey] {
        guard let text = try? String(contentsOf: self.previousKeysFile, encoding: .utf8) else { return [] }
        do {
            return try PEMDocument.parseMultiple(pemString: text).prefix(1).map { try P256.Signing.PublicKey(pemRepresentation: $0.pemString) }
        } catch {
            throw SigningKeyError("\(self.previousKeysFile.path) is not a list of PEM P-256 public keys")
        }
    }

    private func write(current: P256.Signing.PrivateKey, previous: [P256.Signing.PublicKey]) throws {
        // Owner-only (0700): it holds the signing keys (each file 0600).
        try FileManager.default.createDirectory(at: self.directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try Self.writePrivate(current.pemRepresentation, to: self.currentKeyFile)
        // Public keys, but trusted: whoever changes this file has a key published in the JWKS.
        // Created 0600 like the key, so that no umask leaves it open to others (r3 F1).
        try Self.writePrivate(previous.map { $0.pemRepresentation + "\n" }.joined(), to: self.previousKeysFile)
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
