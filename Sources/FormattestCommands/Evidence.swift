//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import ArgumentParser
import CanonicalJSON
import FormAttestForm
import FormAttestEvidence
import FormAttestResponses
import FormAttestServer
import Foundation
import RFC3339
import TransparencyLog

/// `serve`'s evidence settings (defined in ``ServeSettings``, parsed from their resolved values).
struct EvidenceOptions: ParsableArguments {
    @Option(name: .customLong("evidence-dir"), help: ServeSettings.help("evidence-dir"))
    var directory: String?

    @Flag(name: .customLong("evidence-in-answer"), help: ServeSettings.help("evidence-in-answer"))
    var inAnswer = false

    @Option(name: .customLong("evidence-log"), help: ServeSettings.help("evidence-log"))
    var logDirectory: String?

    @Option(name: .customLong("evidence-log-key"), help: ServeSettings.help("evidence-log-key"))
    var logKey: String?

    /// The evidence configuration, nil when neither is asked for. The directory must exist and be
    /// writable: a mistyped path stops the service rather than losing records.
    func configuration() throws -> EvidenceConfiguration? {
        let directory = self.directory
        let inAnswer = self.inAnswer
        let log = try self.logConfiguration()
        guard directory != nil || inAnswer || log != nil else { return nil }
        if let directory {
            try Setting.checkText(directory, "--evidence-dir")
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue else {
                throw UsageError("--evidence-dir \(directory) is not an existing directory")
            }
            guard access(directory, W_OK | X_OK) == 0 else {
                throw UsageError("--evidence-dir \(directory) is not writable by this process")
            }
        }
        return EvidenceConfiguration(archiveDirectory: directory, inAnswer: inAnswer, log: log)
    }

    /// The log's directory and its checkpoint key; both or neither.
    private func logConfiguration() throws -> EvidenceLogConfiguration? {
        switch (self.logDirectory, self.logKey) {
        case (nil, nil): return nil
        case (nil, _?): throw UsageError("--evidence-log-key needs --evidence-log")
        case (_?, nil): throw UsageError("--evidence-log needs --evidence-log-key (create one with 'formattest evidence log-key --name NAME --out FILE')")
        case (let directory?, let keyPath?):
            try Setting.checkText(directory, "--evidence-log")
            try StrictModes.checkSecretFile(keyPath, "--evidence-log-key")
            let text = try InputFile.readText(keyPath)
            let line = text.hasSuffix("\n") ? String(text.dropLast()) : text
            do {
                return EvidenceLogConfiguration(directory: directory, signer: try NoteSigner(keyString: line))
            } catch {
                throw UsageError("--evidence-log-key \(keyPath): \(error.reason)")
            }
        }
    }
}

/// `formattest evidence log-key --name NAME --out FILE`: a new checkpoint key for the evidence log.
struct EvidenceLogKey: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "log-key",
        abstract: "Create the evidence log's checkpoint key (Ed25519, C2SP signed-note format) and print its verifier key.",
        discussion: """
            The name is the log's origin in every checkpoint (a schema-less URL by convention, such as \
            bank.example/formattest-evidence). The file gets mode 0600 and is never overwritten; the \
            verifier key printed (name+hash+base64) is what auditors use to check checkpoints.
            """
    )

    @Option(help: "The key's name: the log's origin.")
    var name: String

    @Option(help: "Where to write the private key (created, mode 0600; an existing file is an error).")
    var out: String

    func run() throws {
        var seed = [UInt8](repeating: 0, count: 32)
        var generator = SystemRandomNumberGenerator()
        for index in seed.indices { seed[index] = generator.next() }
        let signer: NoteSigner
        do {
            signer = try NoteSigner(name: self.name, seed: seed)
        } catch {
            throw UsageError("--name: \(error.reason)")
        }
        let descriptor = open(self.out, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw UsageError("cannot create \(self.out): \(String(cString: strerror(errno)))") }
        defer { close(descriptor) }
        let bytes = Array((signer.privateKeyString + "\n").utf8)
        guard bytes.withUnsafeBytes({ write(descriptor, $0.baseAddress, $0.count) }) == bytes.count, fsync(descriptor) == 0 else {
            throw UsageError("cannot write \(self.out)")
        }
        print(signer.verifierKey)
    }
}

/// `formattest evidence verify FILE`.
struct EvidenceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "evidence",
        abstract: "Evidence records of accepted forms.",
        subcommands: [EvidenceVerify.self, EvidenceLogKey.self]
    )
}

struct EvidenceVerify: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Re-verify an evidence record offline, at its recorded time.",
        discussion: """
            Checks the server's signature (with --jwks), then the form (canonical, for the record's \
            user, within the policy's time window), then what the device signed: the key's \
            attestation to Apple's root at the time it was verified, and the attestation or the \
            assertion over SHA-256 of the record's form. No store and no network. Exit 0 when \
            every step holds, 1 with the failing step's code, 2 on a usage or I/O error.
            """
    )

    @Argument(help: "The evidence record (as written to --evidence-dir); '-' reads stdin.")
    var file: String

    @Option(help: "The server's JWKS (formattest keys jwks, or /.well-known/jwks.json), with every key that ever signed records.")
    var jwks: String

    @Option(name: .customLong("root"), help: "A PEM trust anchor instead of Apple's App Attestation root (repeatable).")
    var roots: [String] = []

    @Option(name: .customLong("app-id"), help: "An app id (TEAMID.bundleID) the record must be for (repeatable; default: any).")
    var appIDs: [String] = []

    @Option(help: "The environment the record must be in: development, production or any (default any).")
    var environment: EnvironmentChoice = .any

    @Option(name: .customLong("receipt-root"), help: "A PEM receipt trust anchor instead of Apple Root CA - G3 (repeatable).")
    var receiptRoots: [String] = []

    @Flag(
        name: .customLong("opaque-client-data"),
        help: "The signed client data need not be a FormAttest form: check only the device's signature over its hash (records assembled from other deployments' recordings)."
    )
    var opaqueClientData = false

    @Flag(name: .long, help: "Print one JSON object instead of text.")
    var json = false

    func run() async throws {
        let envelope = try InputFile.readBytes(self.file)
        let anchors = try InputFile.readCertificates(self.roots, orDefault: AppAttestPolicy.appleTrustAnchors)
        let receiptAnchors = try InputFile.readCertificates(self.receiptRoots, orDefault: AppAttestPolicy.appleReceiptTrustAnchors)
        let signers: [String: SignedEvidence.SignerKey]
        do {
            signers = try SignedEvidence.signers(jwks: try InputFile.readBytes(self.jwks))
        } catch let error as EvidenceError {
            throw UsageError("--jwks \(self.jwks): \(error.reason)")
        }
        let verified: SignedEvidence.Verified
        do {
            verified = try await SignedEvidence.verify(
                envelope, signers: signers, trustAnchors: anchors, receiptTrustAnchors: receiptAnchors, clientData: self.opaqueClientData ? .opaque : .form,
                expecting: SignedEvidence.Expectations(appIDs: self.appIDs.isEmpty ? nil : self.appIDs, environments: self.environment.environments)
            )
        } catch {
            var message = error.reason
            if let code = error.verifierCode { message += " [\(code)]" }
            let rejection = Rejection(code: error.code.identifier, message: message)
            print(self.json ? try rejection.jsonString() : rejection.text)
            throw ExitCode(1)
        }
        let report = EvidenceReport(verified)
        print(self.json ? try JSONOutput.string(report) : report.text)
    }
}

/// What `evidence verify` prints for a record that verified.
struct EvidenceReport: Encodable {
    var verified = true
    var id: String
    var kind: String
    var username: String
    var keyId: String
    var appId: String
    var environment: String
    var counter: UInt32
    var verifiedAt: String
    var keyAttestedAt: String
    var formHash: String
    /// The form's canonical text.
    var form: String
    /// The `kid` of the server key that signed the record.
    var signer: String
    /// Whether the client data was checked as a FormAttest form (not with --opaque-client-data).
    var formChecked: Bool

    init(_ verified: SignedEvidence.Verified) {
        let record = verified.record
        self.id = verified.id
        self.kind = record.kind.rawValue
        self.username = record.username
        self.keyId = Base64URL.encode(record.keyID)
        self.appId = record.appID
        self.environment = record.environment.rawValue
        self.counter = record.counter
        self.verifiedAt = RFC3339UTC.format(record.verifiedAt)
        self.keyAttestedAt = RFC3339UTC.format(record.keyAttestation.verifiedAt)
        self.formHash = Base64URL.encode(record.formHash)
        self.form = String(decoding: record.form, as: UTF8.self)
        self.signer = verified.signer
        self.formChecked = verified.formChecked
    }

    /// A text for a terminal: control and format characters (C0, C1, bidi overrides and isolates,
    /// zero-width ones) as `\u{…}`, so that a hostile username or form cannot reorder or hide
    /// what the report shows. `--json` gives the exact text.
    static func terminalSafe(_ text: String) -> String {
        var result = ""
        for scalar in text.unicodeScalars {
            switch scalar.properties.generalCategory {
            case .control, .format, .lineSeparator, .paragraphSeparator, .privateUse, .surrogate, .unassigned:
                result += "\\u{\(String(scalar.value, radix: 16, uppercase: true))}"
            default:
                result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    var text: String {
        """
        verified: true
        id: \(self.id)
        kind: \(self.kind)
        username: \(Self.terminalSafe(self.username))
        keyId: \(self.keyId)
        appId: \(self.appId) (\(self.environment))
        counter: \(self.counter)
        verifiedAt: \(self.verifiedAt) (key attested \(self.keyAttestedAt))
        formHash: \(self.formHash)
        form: \(Self.terminalSafe(self.form))\(self.formChecked ? "" : " (not checked as a form: --opaque-client-data)")
        signer: \(self.signer)
        """
    }
}
