//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import ArgumentParser
import FormAttestEvidence
import FormAttestServer
import Foundation
import WebAuthn

/// `formattest docs errors|configuration [--write FILE]`: the tables docs/errors.md and
/// docs/configuration.md hold, generated from the code (a test keeps the files the same).
struct Docs: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print (or write into a document) a table generated from the code: errors, passkey-errors, evidence-errors, configuration.",
        discussion: """
            errors: every error code with its status, meaning and what the client should do. \
            passkey-errors: every code of the passkey verifier (verify passkey-registration and \
            passkey-assertion print them) with its meaning. \
            evidence-errors: every code 'evidence verify' refuses a record or bundle with. \
            configuration: every serve setting with its flag, environment variable, configuration \
            file key and default. With --write FILE, the table replaces the lines between \
            "<!-- BEGIN GENERATED: formattest docs TABLE -->" and "<!-- END GENERATED -->" in FILE.
            """
    )

    enum Table: String, ExpressibleByArgument, CaseIterable {
        case errors, configuration
        case passkeyErrors = "passkey-errors"
        case evidenceErrors = "evidence-errors"
    }

    @Argument(help: "errors, passkey-errors, evidence-errors or configuration.")
    var table: Table

    @Option(help: "A Markdown file whose generated region to replace.")
    var write: String?

    var markdown: String {
        switch self.table {
        case .errors: ErrorCatalog.markdownTable
        case .configuration: ServeSettings.markdownTable
        case .passkeyErrors: Self.passkeyErrorTable
        case .evidenceErrors: Self.evidenceErrorTable
        }
    }

    /// The codes of `evidence verify` (``EvidenceError/Code``), in the order its checks run.
    static var evidenceErrorTable: String {
        var lines = ["| code | meaning |", "|---|---|"]
        for code in EvidenceError.Code.allCases {
            lines.append("| `\(code.identifier)` | \(code.summary) |")
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// The passkey verifier's codes (``WebAuthnError/Code``), in the order of the WebAuthn steps.
    static var passkeyErrorTable: String {
        var lines = ["| code | meaning |", "|---|---|"]
        for code in WebAuthnError.Code.allCases {
            lines.append("| `\(code.identifier)` | \(code.summary) |")
        }
        return lines.joined(separator: "\n") + "\n"
    }

    func run() throws {
        guard let path = self.write else {
            print(self.markdown, terminator: "")
            return
        }
        let text = try InputFile.readText(path)
        let begin = "<!-- BEGIN GENERATED: formattest docs \(self.table.rawValue) -->\n"
        let end = "<!-- END GENERATED -->"
        guard let start = text.range(of: begin), let stop = text.range(of: end, range: start.upperBound..<text.endIndex) else {
            throw UsageError("\(path) has no region \(begin.trimmingCharacters(in: .newlines)) ... \(end)")
        }
        let updated = String(text[..<start.upperBound]) + self.markdown + String(text[stop.lowerBound...])
        do {
            try Data(updated.utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
        } catch {
            throw UsageError("cannot write \(path): \(error.localizedDescription)")
        }
    }
}
