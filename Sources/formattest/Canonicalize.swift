//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import ArgumentParser
import CanonicalJSON
import Crypto
import FormAttestClient
import Foundation

/// Reads a JSON document and canonicalizes it, or exits 1 with a one-line reason on stderr.
private func canonicalBytes(of path: String) throws -> [UInt8] {
    let input = try InputFile.readBytes(path)
    do {
        return try CanonicalJSON.canonicalize(input)
    } catch {
        FileHandle.standardError.write(Data("invalid JSON: \(error.description)\n".utf8))
        throw ExitCode(1)
    }
}

struct Canonicalize: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write the RFC 8785 canonical form of a JSON document (no added newline)."
    )

    @Argument(help: "The JSON document; '-' or nothing reads stdin.")
    var path: String = "-"

    func run() throws {
        FileHandle.standardOutput.write(Data(try canonicalBytes(of: self.path)))
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

    func run() throws {
        let digest = Array(SHA256.hash(data: try canonicalBytes(of: self.path)))
        switch self.encoding {
        case .hex: print(HexCoding.encode(digest))
        case .base64url: print(Base64URL.encode(digest))
        }
    }
}
