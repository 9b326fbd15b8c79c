//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Crypto

/// Notes signed in the C2SP signed-note format, with Ed25519 keys (the format of Go's checksum
/// database and of transparency-log checkpoints):
///
/// ```
/// <text, one or more lines, each ending in a newline>
///
/// — <key name> <base64(key hash ‖ signature)>
/// ```
/// The key hash is the first four bytes of SHA-256(name ‖ "\n" ‖ 0x01 ‖ public key), big-endian;
/// the signature is Ed25519 over the text. A verifier key is written `name+hash+base64(0x01 ‖ key)`.
public enum SignedNote {
    /// The most signature lines a note may carry.
    public static let maximumSignatures = 100
    /// The longest note read, in bytes.
    public static let maximumLength = 64 * 1024

    static let ed25519Algorithm: UInt8 = 0x01
    private static let signaturePrefix = Array("\u{2014} ".utf8)

    /// A key or origin name: not empty, UTF-8, no Unicode space, no `+`, no control character.
    public static func isValidName(_ name: String) -> Bool {
        !name.isEmpty
            && name.unicodeScalars.allSatisfy { scalar in
                scalar != "+" && !scalar.properties.isWhitespace && scalar.value >= 0x20 && scalar.value != 0x7F
            }
    }

    /// Note text: no control character but the newline.
    static func isValidText(_ text: String) -> Bool {
        text.unicodeScalars.allSatisfy { $0 == "\n" || ($0.value >= 0x20 && $0.value != 0x7F) }
    }

    /// The key hash of an Ed25519 public key under `name`.
    static func keyHash(name: String, publicKey: [UInt8]) -> UInt32 {
        var hasher = SHA256()
        hasher.update(data: Array(name.utf8) + [0x0A, Self.ed25519Algorithm] + publicKey)
        let digest = Array(hasher.finalize())
        return UInt32(digest[0]) << 24 | UInt32(digest[1]) << 16 | UInt32(digest[2]) << 8 | UInt32(digest[3])
    }

    /// Signs `text` (lines ending in newlines) and returns the whole note.
    public static func sign(text: String, with signer: NoteSigner) throws(TransparencyLogError) -> String {
        guard !text.isEmpty, text.hasSuffix("\n"), !text.contains("\n\n"), Self.isValidText(text) else {
            throw TransparencyLogError(
                code: .noteMalformed, reason: "the text is empty, has an empty line or a control character, or does not end in a newline")
        }
        let signature: [UInt8]
        do {
            signature = Array(try signer.privateKey.signature(for: Array(text.utf8)))
        } catch {
            throw TransparencyLogError(code: .noteSignatureInvalid, reason: "Ed25519 signing failed")
        }
        let hash = signer.keyHash
        let blob = [UInt8(hash >> 24), UInt8(hash >> 16 & 0xFF), UInt8(hash >> 8 & 0xFF), UInt8(hash & 0xFF)] + signature
        return text + "\n\u{2014} \(signer.name) \(StrictBase64.encode(blob))\n"
    }

    /// Reads `note`, checks that it carries a valid signature by `verifier`'s key, and returns
    /// its text. Signature lines by other keys are allowed (a checkpoint may be cosigned by
    /// witnesses) but must be well-formed; a line that names the verifier's key and does not
    /// verify refuses the note.
    public static func open(_ note: some Collection<UInt8>, verifier: NoteVerifier) throws(TransparencyLogError) -> String {
        let bytes = Array(note)
        guard bytes.count <= Self.maximumLength else {
            throw TransparencyLogError(code: .noteMalformed, reason: "the note is over \(Self.maximumLength) bytes")
        }
        guard let whole = String(validating: bytes, as: UTF8.self), Self.isValidText(whole) else {
            throw TransparencyLogError(code: .noteMalformed, reason: "the note is not UTF-8 text without control characters")
        }
        // The text ends at the last blank line; the signature lines follow it.
        var split: Int?
        var index = bytes.count - 2
        while index >= 0 {
            if bytes[index] == 0x0A, bytes[index + 1] == 0x0A {
                split = index
                break
            }
            index -= 1
        }
        guard let split, split > 0, bytes.last == 0x0A else {
            throw TransparencyLogError(code: .noteMalformed, reason: "the note has no blank line before its signatures, or does not end in a newline")
        }
        let text = Array(bytes[...split])
        let lines = bytes[(split + 2)...].dropLast().split(separator: 0x0A, omittingEmptySubsequences: false)
        guard lines.count <= Self.maximumSignatures else {
            throw TransparencyLogError(code: .noteMalformed, reason: "the note has more than \(Self.maximumSignatures) signatures")
        }
        var verified = false
        for line in lines {
            let (name, hash, signature) = try Self.signatureLine(Array(line))
            guard name == verifier.name, hash == verifier.keyHash else { continue }
            guard verifier.publicKey.isValidSignature(signature, for: text) else {
                throw TransparencyLogError(code: .noteSignatureInvalid, reason: "the signature of \(name) does not verify")
            }
            verified = true
        }
        guard verified else {
            throw TransparencyLogError(code: .noteSignatureMissing, reason: "the note has no signature by \(verifier.name)")
        }
        return String(decoding: text, as: UTF8.self)
    }

    private static func signatureLine(_ line: [UInt8]) throws(TransparencyLogError) -> (String, UInt32, [UInt8]) {
        guard line.starts(with: Self.signaturePrefix) else {
            throw TransparencyLogError(code: .noteMalformed, reason: "a signature line does not start with an em dash and a space")
        }
        let rest = line.dropFirst(Self.signaturePrefix.count)
        guard let space = rest.lastIndex(of: 0x20) else {
            throw TransparencyLogError(code: .noteMalformed, reason: "a signature line has no key name")
        }
        let name = String(decoding: rest[..<space], as: UTF8.self)
        guard Self.isValidName(name), let blob = StrictBase64.decode(rest[(space + 1)...]), blob.count > 4 else {
            throw TransparencyLogError(code: .noteMalformed, reason: "a signature line's name or base64 is malformed")
        }
        let hash = UInt32(blob[0]) << 24 | UInt32(blob[1]) << 16 | UInt32(blob[2]) << 8 | UInt32(blob[3])
        return (name, hash, Array(blob.dropFirst(4)))
    }
}

/// An Ed25519 signing key of signed notes, with its name.
public struct NoteSigner: Sendable {
    public let name: String
    let privateKey: Curve25519.Signing.PrivateKey

    /// A signer under `name` from a 32-byte Ed25519 seed.
    public init(name: String, seed: [UInt8]) throws(TransparencyLogError) {
        guard SignedNote.isValidName(name) else {
            throw TransparencyLogError(code: .noteKeyMalformed, reason: "a key name is empty or holds a space, a plus sign or a control character")
        }
        guard seed.count == 32, let key = try? Curve25519.Signing.PrivateKey(rawRepresentation: seed) else {
            throw TransparencyLogError(code: .noteKeyMalformed, reason: "an Ed25519 seed is 32 bytes")
        }
        self.name = name
        self.privateKey = key
    }

    /// A signer from its key string, `PRIVATE+KEY+name+hash+base64(0x01 ‖ seed)` (Go's
    /// `note.NewSigner`); the hash must match the key.
    public init(keyString: String) throws(TransparencyLogError) {
        // The key's base64 may hold a plus sign: only the first four separate fields.
        let parts = keyString.split(separator: "+", maxSplits: 4, omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 5, parts[0] == "PRIVATE", parts[1] == "KEY",
            let blob = StrictBase64.decode(parts[4].utf8), blob.count == 33, blob[0] == SignedNote.ed25519Algorithm
        else {
            throw TransparencyLogError(code: .noteKeyMalformed, reason: "a signer key is PRIVATE+KEY+name+hash+base64(0x01 ‖ seed)")
        }
        try self.init(name: parts[2], seed: Array(blob.dropFirst()))
        guard parts[3] == NoteVerifier.hex(self.keyHash) else {
            throw TransparencyLogError(code: .noteKeyMalformed, reason: "the signer key's hash does not match its key")
        }
    }

    /// The key hash that names this key in signature lines.
    public var keyHash: UInt32 {
        SignedNote.keyHash(name: self.name, publicKey: Array(self.privateKey.publicKey.rawRepresentation))
    }

    /// The signer key string (`PRIVATE+KEY+name+hash+base64(0x01 ‖ seed)`, Go's format): a
    /// secret, for the key file only.
    public var privateKeyString: String {
        let blob = [SignedNote.ed25519Algorithm] + Array(self.privateKey.rawRepresentation)
        return "PRIVATE+KEY+\(self.name)+\(NoteVerifier.hex(self.keyHash))+\(StrictBase64.encode(blob))"
    }

    /// The verifier key string to publish: `name+hash+base64(0x01 ‖ public key)`.
    public var verifierKey: String {
        let blob = [SignedNote.ed25519Algorithm] + Array(self.privateKey.publicKey.rawRepresentation)
        return "\(self.name)+\(NoteVerifier.hex(self.keyHash))+\(StrictBase64.encode(blob))"
    }
}

/// An Ed25519 verifier of signed notes, from its published key string.
public struct NoteVerifier: Sendable {
    public let name: String
    public let keyHash: UInt32
    let publicKey: Curve25519.Signing.PublicKey

    /// Reads `name+hash+base64(0x01 ‖ public key)`; the hash must match the key.
    public init(keyString: String) throws(TransparencyLogError) {
        // The key's base64 may hold a plus sign: only the first two separate fields.
        let parts = keyString.split(separator: "+", maxSplits: 2, omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 3, SignedNote.isValidName(parts[0]),
            let blob = StrictBase64.decode(parts[2].utf8), blob.count == 33, blob[0] == SignedNote.ed25519Algorithm,
            let key = try? Curve25519.Signing.PublicKey(rawRepresentation: Array(blob.dropFirst()))
        else {
            throw TransparencyLogError(code: .noteKeyMalformed, reason: "a verifier key is name+hash+base64(0x01 ‖ Ed25519 key)")
        }
        let hash = SignedNote.keyHash(name: parts[0], publicKey: Array(blob.dropFirst()))
        guard parts[1] == Self.hex(hash) else {
            throw TransparencyLogError(code: .noteKeyMalformed, reason: "the verifier key's hash does not match its key")
        }
        self.name = parts[0]
        self.keyHash = hash
        self.publicKey = key
    }

    static func hex(_ value: UInt32) -> String {
        let digits = Array("0123456789abcdef".utf8)
        return String(decoding: (0..<8).map { digits[Int(value >> UInt32(28 - 4 * $0) & 0xF)] }, as: UTF8.self)
    }
}
