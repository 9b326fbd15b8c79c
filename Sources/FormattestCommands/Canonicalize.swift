//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import ArgumentParser
import CanonicalJSON
import Crypto
import FormAttestForm
import Foundation

/// `--max-bytes`: the largest document `canonicalize` and `hash` read. The nesting limit stays
/// the parser's (64): size is what a large legitimate document needs, depth is not.
struct DocumentSizeOption: ParsableArguments {
    @Option(name: .customLong("max-bytes"), help: "The largest document accepted, in bytes (default 16 MiB).")
    var maximumBytes = CanonicalJSON.Limits.default.maximumSize

    func validate() throws {
        guard self.maximumBytes > 0 else { throw ValidationError("--max-bytes must be positive.") }
    }

    /// Reads a JSON document and canonicalizes it, or exits 1 with a one-line reason on stderr.
    func canonicalBytes(of path: String) throws -> [UInt8] {
        let input = try InputFile.readBytes(path, limit: self.maximumBytes)
        var limits = CanonicalJSON.Limits.default
        limits.maximumSize = self.maximumBytes
        do {
            return try CanonicalJSON.canonicalize(input, limits: limits)
        } catch {
            FileHandle.standardError.write(Data("invalid JSON: \(error.description)\n".utf8))
            throw ExitCode(1)
        }
    }
}

struct Canonicalize: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write the RFC 8785 canonical form of a JSON document (no added newline)."
    )

    @Argument(help: "The JSON document; '-' or nothing reads stdin.")
    var path: String = "-"

    @OptionGroup var size: DocumentSizeOption

    func run() throws {
        FileHandle.standardOutput.write(Data(try self.size.canonicalBytes(of: self.path)))
    }
}

struct Hash: ParsableCommand {
    enum Encoding: String, ExpressibleByArgument, CaseIterable {
        case hex, base64url
    }

    static let configuration = CommandConfiguration(
        abstract: "Print SHA-256 of the canonical form (the clientDataHash a form is signed over)."
    )

    @Argument(help: "The JSON document; '-' or nothing reads stdin.")
    var path: String = "-"

    @Option(help: "hex (default) or base64url.")
    var encoding: Encoding = .hex

    @OptionGroup var size: DocumentSizeOption

    func run() throws {
        let digest = Array(SHA256.hash(data: try self.size.canonicalBytes(of: self.path)))
        switch self.encoding {
        case .hex: print(HexCoding.encode(digest))
        case .base64url: print(Base64URL.encode(digest))
        }
    }
}
