//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import FormAttestForm
package import Foundation
package import RFC3339
import SwiftASN1
import X509

/// Reading the command line's input files. Every failure here is a usage or I/O error (exit 2).
package enum InputFile {
    /// Largest input file read, far above any App Attest object: a bound on memory, not a policy.
    package static let maximumSize = 1 << 20

    /// The bytes of `path`, or of standard input for `-`, read in chunks and refused as soon as
    /// they pass the limit: a huge file costs at most the limit in memory, never its own size.
    package static func readBytes(_ path: String, limit: Int = InputFile.maximumSize) throws -> [UInt8] {
        let handle: FileHandle
        if path == "-" {
            handle = FileHandle.standardInput
        } else {
            guard let opened = FileHandle(forReadingAtPath: path) else {
                throw UsageError("cannot read \(path)")
            }
            handle = opened
        }
        defer { if path != "-" { try? handle.close() } }
        var bytes: [UInt8] = []
        do {
            while bytes.count <= limit, let chunk = try handle.read(upToCount: 64 * 1024), !chunk.isEmpty {
                bytes += chunk
            }
        } catch {
            throw UsageError("cannot read \(path)")
        }
        guard bytes.count <= limit else {
            throw UsageError("\(path) is larger than \(limit) bytes")
        }
        return bytes
    }

    /// The text of `path` (UTF-8).
    static func readText(_ path: String) throws -> String {
        guard let text = String(validating: try self.readBytes(path), as: UTF8.self) else {
            throw UsageError("\(path) is not UTF-8 text")
        }
        return text
    }

    /// A binary document given either as raw CBOR or as base64/base64url text.
    ///
    /// Raw CBOR App Attest objects are maps, whose first byte (0xA0-0xBF) is never a base64
    /// character; anything else is read as base64 text, whitespace ignored.
    static func readBinaryDocument(_ path: String) throws -> [UInt8] {
        let bytes = try self.readBytes(path)
        if let first = bytes.first, first >> 5 == 5 {
            return bytes
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw UsageError("\(path) is neither CBOR nor base64 text")
        }
        return try self.decodeBase64(text, what: path)
    }

    /// Decodes standard or URL-safe base64, padded or not, ignoring whitespace (every member of
    /// Foundation's `CharacterSet.whitespacesAndNewlines`).
    static func decodeBase64(_ text: String, what: String) throws -> [UInt8] {
        let compact = Self.removingWhitespace(text)
        guard !compact.isEmpty, let bytes = Base64URL.decode(compact) else {
            throw UsageError("\(what) is not base64 or base64url")
        }
        return bytes
    }

    /// ``decodeBase64(_:what:)`` over text given as its UTF-8 bytes (a batch line's JSON string),
    /// with the same result: ASCII text is filtered and decoded as bytes, without the two `String`s
    /// the text path makes (a 5.7 KB attestation a line in `wrap --batch`); anything else takes the
    /// text path.
    static func decodeBase64(utf8 text: [UInt8], what: String) throws -> [UInt8] {
        guard text.allSatisfy({ $0 < 0x80 }) else {
            return try self.decodeBase64(String(decoding: text, as: UTF8.self), what: what)
        }
        let compact = text.contains(where: Self.isASCIIWhitespace) ? text.filter { !Self.isASCIIWhitespace($0) } : text
        guard !compact.isEmpty, let bytes = Base64URL.decode(utf8: compact) else {
            throw UsageError("\(what) is not base64 or base64url")
        }
        return bytes
    }

    /// `text` without the members of `CharacterSet.whitespacesAndNewlines`.
    ///
    /// ASCII text (base64 always is) is filtered byte by byte: asking Foundation for the set once
    /// per character took half of `wrap --batch`'s CPU (docs/performance.md, issue 33). Text with
    /// a scalar beyond ASCII is filtered by the set itself, taken once, so that Unicode whitespace
    /// (a no-break space, U+2028) is ignored exactly as before.
    static func removingWhitespace(_ text: String) -> String {
        var compact: [UInt8] = []
        compact.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            guard byte < 0x80 else {
                let whitespace = CharacterSet.whitespacesAndNewlines
                return String(text.unicodeScalars.filter { !whitespace.contains($0) })
            }
            if !Self.isASCIIWhitespace(byte) { compact.append(byte) }
        }
        return String(decoding: compact, as: UTF8.self)
    }

    /// The ASCII members of `CharacterSet.whitespacesAndNewlines`: tab, LF, VT, FF, CR
    /// (0x09-0x0D) and space.
    static func isASCIIWhitespace(_ byte: UInt8) -> Bool {
        byte == 0x20 || (0x09...0x0D).contains(byte)
    }

    /// A PEM certificate file.
    static func readCertificate(_ path: String) throws -> Certificate {
        do {
            return try Certificate(pemEncoded: try self.readText(path))
        } catch let error as UsageError {
            throw error
        } catch {
            throw UsageError("\(path) is not a PEM certificate")
        }
    }

    /// The PEM certificates named by a repeatable `--root`/`--receipt-root` option, or `defaults`
    /// (``AppAttestPolicy/appleTrustAnchors`` or ``AppAttestPolicy/appleReceiptTrustAnchors``)
    /// when none is named.
    static func readCertificates(_ paths: [String], orDefault defaults: [Certificate]) throws -> [Certificate] {
        try paths.isEmpty ? defaults : paths.map(self.readCertificate)
    }
}

/// Hexadecimal text.
package enum HexCoding {
    /// Decodes hex (either case); `nil` for odd length or another character.
    package static func decode(_ text: String) -> [UInt8]? {
        AppAttest.bytes(hex: text)
    }

    static func encode(_ bytes: some Sequence<UInt8>) -> String {
        AppAttest.hex(bytes)
    }
}

extension RFC3339UTC {
    /// A time given on the command line or in a batch line: strict RFC 3339 UTC (the one reader
    /// of untrusted times), or a usage error.
    package static func argument(_ text: String) throws -> Date {
        guard let date = Self.parse(text) else {
            throw UsageError("\(text.prefix(64)) is not an RFC 3339 UTC time such as 2024-02-07T21:08:56Z")
        }
        return date
    }
}
