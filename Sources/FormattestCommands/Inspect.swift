//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttestInspector
import ArgumentParser
import Foundation

/// The `--mode` argument (a local type: a conformance of the library's enum would be public).
enum InspectModeArgument: String, ExpressibleByArgument, CaseIterable {
    case semantic, forensic, tree

    var mode: InspectionMode {
        switch self {
        case .semantic: .semantic
        case .forensic: .forensic
        case .tree: .tree
        }
    }
}

struct Inspect: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Decode an attestation object, an assertion or a receipt (shows; never judges).",
        discussion: """
            The input is raw (CBOR, or DER/BER for a receipt) or base64/base64url text. Views:
            semantic (default) names each field; forensic adds each field's offset, length and bytes;
            tree lists every CBOR and ASN.1 item with offset, header length and length.
            Exit status 0 whenever the input could be read, however malformed it is.
            """
    )

    @Argument(help: "The file to inspect; '-' reads stdin.")
    var path: String

    @Option(help: "semantic, forensic or tree.")
    var mode: InspectModeArgument = .semantic

    @Flag(help: "Print JSON instead of text.")
    var json = false

    func run() throws {
        let inspection = Inspection(try Self.read(self.path), mode: self.mode.mode)
        print(self.json ? inspection.jsonText : inspection.text, terminator: self.json ? "\n" : "")
    }

    /// Raw bytes, unless the file is base64 text (then decoded): the inspector shows what is there.
    static func read(_ path: String) throws -> [UInt8] {
        let bytes = try InputFile.readBytes(path)
        guard let first = bytes.first, first >> 5 != 5, first != 0x30,
            let text = String(validating: bytes, as: UTF8.self),
            let decoded = try? InputFile.decodeBase64(text, what: path)
        else {
            return bytes
        }
        return decoded
    }
}
