//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import ArgumentParser
import CanonicalJSON
import Crypto
import FormAttestEvidence
import FormAttestForm
import FormAttestResponses
package import FormAttestServer
import Foundation
import RFC3339
import TransparencyLog
import TransparencyLogFiles

extension EvidenceConfiguration {
    /// `serve`'s evidence settings (`evidence-dir`, `evidence-in-answer`, `evidence-log`,
    /// `evidence-log-key`), read from the resolved settings; nil when none is asked for. The
    /// directory must exist and be writable: a mistyped path stops the service rather than losing
    /// records. The log's directory and its key go together, and the key is read now.
    ///
    /// - Throws: ``UsageError`` naming each setting with its source.
    package init?(_ settings: ServeSettings.Resolved) throws {
        let directory = settings.textIfSet("evidence-dir")
        let inAnswer = settings.toggle("evidence-in-answer")
        let log = try Self.log(settings)
        guard directory != nil || inAnswer || log != nil else { return nil }
        if let directory {
            let name = settings.name("evidence-dir")
            try settings.reported { try Setting.checkText(directory, name) }
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue else {
                throw UsageError("\(name) \(directory) is not an existing directory")
            }
            guard access(directory, W_OK | X_OK) == 0 else {
                throw UsageError("\(name) \(directory) is not writable by this process")
            }
        }
        self.init(archiveDirectory: directory, inAnswer: inAnswer, log: log)
    }

    /// The log's directory and its checkpoint key; both or neither.
    private static func log(_ settings: ServeSettings.Resolved) throws -> EvidenceLogConfiguration? {
        let (directoryName, keyName) = (settings.name("evidence-log"), settings.name("evidence-log-key"))
        switch (settings.textIfSet("evidence-log"), settings.textIfSet("evidence-log-key")) {
        case (nil, nil): return nil
        case (nil, _?): throw UsageError("\(keyName) needs \(directoryName)")
        case (_?, nil):
            throw UsageError(
                "\(directoryName) needs \(keyName) (create one with 'formattest evidence log-key --name NAME --out FILE')")
        case (let directory?, let keyPath?):
            try settings.reported { try Setting.checkText(directory, directoryName) }
            try StrictModes.checkSecretFile(keyPath, keyName)
            let text = try InputFile.readText(keyPath)
            let line = text.hasSuffix("\n") ? String(text.dropLast()) : text
            do {
                return EvidenceLogConfiguration(directory: directory, signer: try NoteSigner(keyString: line))
            } catch {
                throw UsageError("\(keyName) \(keyPath): \(error.reason)")
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
        subcommands: [EvidenceVerify.self, EvidenceLogKey.self, EvidenceAudit.self, EvidenceExport.self, EvidenceImport.self]
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
            assertion over SHA-256 of the record's form. No store and no network. With --log-key \
            the file is a bundle ('formattest evidence export'): its checkpoint is checked with the \
            log's key and the record's inclusion in it first. A version-2 record (written with the \
            evidence log on) references its key's registration: give the log's registrations \
            directory with --registrations (a bundle carries the registration itself). A version-3 \
            record (a form confirmed with a passkey) carries the passkey's registration and \
            assertion: the WebAuthn checks run again on both (the registration at its recorded time, \
            its chain to --passkey-root when given; the assertion over SHA-256 of the form with the \
            registered key, at the recorded previous sign count), and the record's UV, BE, BS and \
            amr claims must be what the signed flags say. Exit 0 when \
            every step holds, 1 with the failing step's code, 2 on a usage or I/O error.
            """
    )

    @Argument(help: "The evidence record (as written to --evidence-dir), or with --log-key a bundle; '-' reads stdin.")
    var file: String

    @Option(
        name: .customLong("log-key"),
        help: "The evidence log's verifier key (name+hash+base64): the file is a bundle from 'formattest evidence export'."
    )
    var logKey: String?

    @Option(help: "The server's JWKS (formattest keys jwks, or /.well-known/jwks.json), with every key that ever signed records.")
    var jwks: String

    @Option(
        name: .customLong("registrations"),
        help:
            "For a version-2 record: the directory of key registrations (the evidence log's DIR/registrations), where the record's key registration is read."
    )
    var registrations: String?

    @Option(name: .customLong("root"), help: "A PEM trust anchor instead of Apple's App Attestation root (repeatable).")
    var roots: [String] = []

    @Option(name: .customLong("app-id"), help: "An app id (TEAMID.bundleID) the record must be for (repeatable; default: any).")
    var appIDs: [String] = []

    @Option(help: "The environment the record must be in: development, production or any (default any).")
    var environment: EnvironmentChoice = .any

    @Option(name: .customLong("receipt-root"), help: "A PEM receipt trust anchor instead of Apple Root CA - G3 (repeatable).")
    var receiptRoots: [String] = []

    @Option(
        name: .customLong("passkey-root"),
        help:
            "For a record with a passkey: a PEM trust anchor for its registration's attestation chain (repeatable; default none: the statement's signatures are checked and the report says not anchored)."
    )
    var passkeyRoots: [String] = []

    @Flag(
        name: .customLong("opaque-client-data"),
        help:
            "The signed client data need not be a FormAttest form: check only the device's signature over its hash (records assembled from other deployments' recordings)."
    )
    var opaqueClientData = false

    @Flag(name: .long, help: "Print one JSON object instead of text.")
    var json = false

    func run() async throws {
        let envelope = try InputFile.readBytes(self.file)
        let anchors = try InputFile.readCertificates(self.roots, orDefault: AppAttestPolicy.appleTrustAnchors)
        let receiptAnchors = try InputFile.readCertificates(self.receiptRoots, orDefault: AppAttestPolicy.appleReceiptTrustAnchors)
        let passkeyAnchors = try InputFile.readCertificates(self.passkeyRoots, orDefault: [])
        let signers: [String: SignedEvidence.SignerKey]
        do {
            signers = try SignedEvidence.signers(jwks: try InputFile.readBytes(self.jwks))
        } catch let error as EvidenceError {
            throw UsageError("--jwks \(self.jwks): \(error.reason)")
        }
        var logVerifier: NoteVerifier?
        if let logKey = self.logKey {
            do { logVerifier = try NoteVerifier(keyString: logKey) } catch { throw UsageError("--log-key: \(error.reason)") }
        }
        let registrations = try self.registrationResolver()
        // `any` expects nothing of the environment (a record of a passkey alone names none).
        let expectations = SignedEvidence.Expectations(
            appIDs: self.appIDs.isEmpty ? nil : self.appIDs, environments: self.environment == .any ? nil : self.environment.environments)
        let clientData: SignedEvidence.ClientData = self.opaqueClientData ? .opaque : .form
        var report: EvidenceReport
        do {
            if let logVerifier {
                let verified = try await EvidenceBundle(bytes: envelope).verify(
                    logKey: logVerifier, signers: signers, trustAnchors: anchors, receiptTrustAnchors: receiptAnchors, clientData: clientData,
                    expecting: expectations, passkeyTrustAnchors: passkeyAnchors)
                report = EvidenceReport(verified.evidence)
                report.log = EvidenceReport.LogInclusion(verified)
            } else {
                if (try? EvidenceBundle(bytes: envelope)) != nil {
                    throw UsageError("\(self.file) is a bundle: pass the evidence log's verifier key with --log-key")
                }
                report = EvidenceReport(
                    try await SignedEvidence.verify(
                        envelope, signers: signers, trustAnchors: anchors, receiptTrustAnchors: receiptAnchors, clientData: clientData,
                        expecting: expectations, registrations: registrations, passkeyTrustAnchors: passkeyAnchors))
            }
        } catch let error as EvidenceError {
            if error.code == .registrationMissing, logVerifier == nil {
                guard let directory = self.registrations else {
                    throw UsageError(
                        "\(self.file) is a version-2 record: it references its key's registration; pass the log's registrations directory with --registrations DIR (serve --evidence-log's DIR/registrations), or verify a bundle from 'formattest evidence export'"
                    )
                }
                let path = Self.registrationPath(envelope: envelope, directory: directory).map { " (\($0))" } ?? ""
                let rejection = Rejection(code: error.code.identifier, message: error.reason + path)
                print(self.json ? try rejection.jsonString() : rejection.text)
                throw ExitCode(1)
            }
            var message = error.reason
            if let code = error.verifierCode { message += " [\(code)]" }
            let rejection = Rejection(code: error.code.identifier, message: message)
            print(self.json ? try rejection.jsonString() : rejection.text)
            throw ExitCode(1)
        }
        print(self.json ? try JSONOutput.string(report) : report.text)
    }

    /// The registrations directory as a resolver (nil without --registrations). A file that
    /// cannot be read is not there; what is read is checked by the record's reader.
    private func registrationResolver() throws -> EvidenceRecord.RegistrationResolver? {
        guard let directory = self.registrations else { return nil }
        guard self.logKey == nil else {
            throw UsageError("--registrations is for a record: a bundle (--log-key) carries its key's registration")
        }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw UsageError("--registrations \(directory) is not a directory")
        }
        let files = ContentAddressedDirectory(directory: directory)
        return { id in (try? files.read(id)) ?? nil }
    }

    /// Where the envelope's record's registration was looked for (for the message).
    private static func registrationPath(envelope: [UInt8], directory: String) -> String? {
        guard let payload = (try? CanonicalJSON.parse(envelope))?["payload"]?.stringValue.flatMap(Base64URL.decode),
            let id = (try? EvidenceRecord.registrationID(inPayload: payload)) ?? nil
        else { return nil }
        return ContentAddressedDirectory(directory: directory).path(of: id)
    }
}

/// What `evidence verify` prints for a record that verified.
struct EvidenceReport: Encodable {
    var verified = true
    var id: String
    var kind: String
    var username: String
    /// The App Attest key's members: absent for a form signed by a passkey alone (kind `passkey`).
    var keyId: String?
    var appId: String?
    var environment: String?
    var counter: UInt32?
    var verifiedAt: String
    var keyAttestedAt: String?
    var formHash: String
    /// The form's canonical text.
    var form: String
    /// The `kid` of the server key that signed the record.
    var signer: String
    /// Whether the client data was checked as a FormAttest form (not with --opaque-client-data).
    var formChecked: Bool
    /// For a bundle: where the record is in the evidence log.
    var log: LogInclusion?
    /// For a record with a passkey (version 3): the factors' RFC 8176 `amr`, as re-verified.
    var amr: [String]?
    var passkey: PasskeyReport?

    /// A record's passkey, as its signatures showed it.
    struct PasskeyReport: Encodable {
        var credentialId: String
        var rpId: String
        var registeredAt: String
        /// Whether the registration's chain reached a --passkey-root (absent: no certificate).
        var attestationAnchored: Bool?
        var previousSignCount: UInt32
        var signCount: UInt32
        var userVerified: Bool
        var backupEligible: Bool
        var backedUp: Bool

        init(_ passkey: PasskeyEvidence, anchored: Bool?) {
            self.credentialId = Base64URL.encode(passkey.credentialID)
            self.rpId = passkey.policy.relyingPartyID
            self.registeredAt = RFC3339UTC.format(passkey.registration.verifiedAt)
            self.attestationAnchored = anchored
            self.previousSignCount = passkey.assertion.previousSignCount
            self.signCount = passkey.assertion.signCount
            self.userVerified = passkey.assertion.userVerified
            self.backupEligible = passkey.assertion.backupEligible
            self.backedUp = passkey.assertion.backedUp
        }
    }

    /// A bundle's record in the log: its leaf, the checkpoint that includes it, and whether the
    /// server's own signature came with it.
    struct LogInclusion: Encodable {
        var origin: String
        var index: UInt64
        var checkpointSize: UInt64
        var serverSigned: Bool

        init(_ verified: EvidenceBundle.Verified) {
            self.origin = verified.checkpoint.origin
            self.index = verified.index
            self.checkpointSize = verified.checkpoint.size
            self.serverSigned = verified.serverSigned
        }
    }

    init(_ verified: SignedEvidence.Verified) {
        let record = verified.record
        self.id = verified.id
        self.kind = record.kind.rawValue
        self.username = record.username
        if record.signedByAppAttest {
            self.keyId = Base64URL.encode(record.keyID)
            self.appId = record.appID
            self.environment = record.environment.rawValue
            self.counter = record.counter
            self.keyAttestedAt = RFC3339UTC.format(record.keyAttestation.verifiedAt)
        }
        if let passkey = record.passkey {
            self.amr = record.methodReferences
            self.passkey = PasskeyReport(passkey, anchored: verified.passkeyAttestationAnchored)
        }
        self.verifiedAt = RFC3339UTC.format(record.verifiedAt)
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
        var appAttest = ""
        if let keyId = self.keyId, let appId = self.appId, let environment = self.environment, let counter = self.counter {
            appAttest = "keyId: \(keyId)\nappId: \(appId) (\(environment))\ncounter: \(counter)\n"
        }
        var passkey = ""
        if let report = self.passkey {
            let anchored = report.attestationAnchored.map { $0 ? "anchored to a --passkey-root" : "not anchored" } ?? "no certificate"
            passkey = """
                passkey: \(report.credentialId) (rp \(Self.terminalSafe(report.rpId)), registered \(report.registeredAt), attestation \(anchored))
                passkey sign count: \(report.previousSignCount) -> \(report.signCount); UV \(report.userVerified), BE \(report.backupEligible), BS \(report.backedUp)
                amr: \((self.amr ?? []).joined(separator: " "))

                """
        }
        return """
            verified: true
            id: \(self.id)
            kind: \(self.kind)
            username: \(Self.terminalSafe(self.username))
            \(appAttest)\(passkey)verifiedAt: \(self.verifiedAt)\(self.keyAttestedAt.map { " (key attested \($0))" } ?? "")
            formHash: \(self.formHash)
            form: \(Self.terminalSafe(self.form))\(self.formChecked ? "" : " (not checked as a form: --opaque-client-data)")
            signer: \(self.signer)
            """
                + (self.log.map { log in
                    "\nlog: leaf \(log.index) of \(log.checkpointSize) in \(Self.terminalSafe(log.origin))'s signed checkpoint\(log.serverSigned ? ", with the server's signature" : " (no server signature in the bundle: the checkpoint's is the server's statement)")"
                } ?? "")
    }
}

/// `formattest evidence audit --log DIR --log-key KEY --new CHECKPOINT [--old CHECKPOINT]`.
struct EvidenceAudit: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "audit",
        abstract: "Check an evidence log's files against its signed checkpoints: every leaf present, unaltered and in order.",
        discussion: """
            Reads the log's directory (nothing is changed), rebuilds the tree from the records \
            themselves, and checks that its first OLD leaves hash to the old checkpoint's root and its \
            first NEW leaves to the new one's, so that the new checkpoint extends the old; that each \
            record matches the log's own hash of it (a record removed, altered or moved is named by \
            its index); that each is a canonical (RFC 8785) JSON document; and, for each version-2 \
            record, that its key's registration (DIR/registrations) is there, hashes to the record's \
            reference and names the record's key, app id and environment. Exit 0: the log holds \
            exactly what both checkpoints commit to; 1: it does not (the first problem is named); 2: usage.
            """
    )

    @Option(help: "The log's directory (serve --evidence-log).")
    var log: String

    @Option(name: .customLong("log-key"), help: "The log's verifier key (name+hash+base64, as 'formattest evidence log-key' printed it).")
    var logKey: String

    @Option(help: "A signed checkpoint (the note, as GET /api/evidence/checkpoint answers it) that the log must extend (default: the empty tree).")
    var old: String?

    @Option(help: "The signed checkpoint the log must hold exactly.")
    var new: String

    func run() throws {
        let verifier: NoteVerifier
        do { verifier = try NoteVerifier(keyString: self.logKey) } catch { throw UsageError("--log-key: \(error.reason)") }
        let newer = try Self.checkpoint(self.new, verifier: verifier, option: "--new")
        let older = try self.old.map { try Self.checkpoint($0, verifier: verifier, option: "--old") }
        guard (older?.size ?? 0) <= newer.size else {
            throw UsageError("--old commits to \(older?.size ?? 0) leaves, more than --new's \(newer.size)")
        }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: self.log, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw UsageError("--log \(self.log) is not a directory")
        }
        let files: TileLogDirectory
        do {
            files = try TileLogDirectory(readingDirectory: self.log)
        } catch {
            return try Self.fail("the log cannot be read: \(error)")
        }
        guard files.size >= newer.size else {
            return try Self.fail(
                "the log holds \(files.size) leaves, fewer than the \(newer.size) the new checkpoint commits to (records were removed)")
        }
        var range = CompactRange()
        if let older, older.size == 0, older.rootHash != MerkleHash.emptyRoot {
            return try Self.fail("the old checkpoint's empty tree has a root that is not SHA-256 of nothing")
        }
        var registrations = RegistrationAudit(directory: (self.log as NSString).appendingPathComponent("registrations"))
        var bundle: UInt64 = 0
        while range.size < newer.size {
            let entries: [[UInt8]]
            let hashes: [[UInt8]]
            do {
                entries = try files.entryBundle(bundle, upToDamage: true)
                hashes = try files.hashTile(level: 0, index: bundle)
            } catch {
                return try Self.fail("leaves from \(bundle * TileLayout.width): \(error)")
            }
            for (position, hash) in hashes.enumerated() where range.size < newer.size {
                guard position < entries.count else {
                    return try Self.fail("leaf \(range.size): its record is missing (the entry bundle is cut short)")
                }
                let entry = entries[position]
                let index = range.size
                guard MerkleHash.leaf(entry) == hash else {
                    return try Self.fail("leaf \(index): its record does not match the log's hash of it (altered, removed or moved)")
                }
                guard let parsed = try? CanonicalJSON.parse(entry), parsed.canonicalBytes == entry else {
                    return try Self.fail("leaf \(index): not a canonical JSON record")
                }
                if let problem = registrations.check(entry, parsed) {
                    return try Self.fail("leaf \(index): \(problem)")
                }
                range.append(leafHash: hash)
                if let older, range.size == older.size, range.root != older.rootHash {
                    return try Self.fail("the log's first \(older.size) leaves do not hash to the old checkpoint's root: the log was rewritten")
                }
            }
            bundle += 1
        }
        guard range.root == newer.rootHash else {
            return try Self.fail("the log's first \(newer.size) leaves do not hash to the new checkpoint's root: the log was rewritten")
        }
        print(
            "audited \(newer.size) leaves: the log's first \(newer.size) leaves are exactly what the new checkpoint commits to\(older.map { ", and they extend the old one (\($0.size) leaves)" } ?? "")"
        )
        if registrations.checked > 0 {
            print("key registrations: \(registrations.checked) referenced, each present, hashing to its reference and naming its records' key")
        }
        if files.size > newer.size {
            print("note: the log holds \(files.size - newer.size) more leaves, which no checkpoint given here covers")
        }
        let uncommitted = (try? files.uncommittedBytes()) ?? [:]
        for (file, count) in uncommitted.sorted(by: { $0.key < $1.key }) {
            print(
                "note: \(file) holds \(count) bytes past the committed size: not part of the log (an append that never committed, or bytes someone added)"
            )
        }
    }

    private static func checkpoint(_ path: String, verifier: NoteVerifier, option: String) throws -> Checkpoint {
        do {
            let text = try SignedNote.open(try InputFile.readBytes(path), verifier: verifier)
            let checkpoint = try Checkpoint(body: Array(text.utf8))
            guard checkpoint.origin == verifier.name else {
                throw UsageError("\(option) \(path): the checkpoint's origin is not the key's name")
            }
            return checkpoint
        } catch let error as TransparencyLogError {
            throw UsageError("\(option) \(path): \(error.reason)")
        }
    }

    private static func fail(_ message: String) throws {
        print("audit failed: \(message)")
        throw ExitCode(1)
    }
}

/// The key registrations an audit meets: each read and checked once (a key's records share it),
/// then every record that references it compared with it.
struct RegistrationAudit {
    let files: ContentAddressedDirectory
    private var known: [[UInt8]: KeyRegistration] = [:]

    init(directory: String) {
        self.files = ContentAddressedDirectory(directory: directory)
    }

    /// How many distinct registrations were checked.
    var checked: Int { self.known.count }

    /// What is wrong with a record's registration, or nil (a version-1 record has none to check).
    mutating func check(_ entry: [UInt8], _ parsed: JSONValue) -> String? {
        let id: [UInt8]
        do {
            guard let referenced = try EvidenceRecord.registrationID(inPayload: entry) else { return nil }
            id = referenced
        } catch {
            return error.reason
        }
        let path = self.files.path(of: id)
        let registration: KeyRegistration
        if let known = self.known[id] {
            registration = known
        } else {
            let bytes: [UInt8]?
            do { bytes = try self.files.read(id) } catch { return "its key's registration \(path) cannot be read: \(error)" }
            guard let bytes else { return "its key's registration \(path) is missing (deleted: the record can no longer be verified)" }
            guard KeyRegistration.id(of: bytes) == id else {
                return "its key's registration \(path) does not hash to the record's reference (altered)"
            }
            do { registration = try KeyRegistration(bytes: bytes) } catch { return "\(path) is not a key registration: \(error.reason)" }
            self.known[id] = registration
        }
        guard parsed["keyId"]?.stringValue == Base64URL.encode(registration.keyID),
            parsed["appId"]?.stringValue.map({ Array($0.utf8) }) == Array(registration.appID.utf8),
            parsed["environment"]?.stringValue == registration.environment.rawValue
        else { return "its key's registration \(path) names another key, app id or environment than the record" }
        return nil
    }
}

/// `formattest evidence export --log DIR --log-key VKEY --index I [--checkpoint NOTE] [--archive DIR] [--out FILE]`.
struct EvidenceExport: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Export one logged record as a bundle that verifies alone: the record, its inclusion proof and a signed checkpoint.",
        discussion: """
            Reads the log's directory (nothing is changed). The checkpoint (default: DIR/checkpoint, \
            the last one the service published) is checked with the log's key, and the log's files \
            must hold exactly the tree it commits to. With --archive (the service's --evidence-dir), \
            the record's server-signed envelope goes in the bundle too. 'formattest evidence verify \
            BUNDLE --log-key VKEY --jwks JWKS' checks it with no store, log or network. Exit 0: \
            written; 1: the log cannot prove this record; 2: usage. A version-2 record's key \
            registration (DIR/registrations) goes in the bundle, checked against the record's reference.
            """
    )

    @Option(help: "The log's directory (serve --evidence-log).")
    var log: String

    @Option(name: .customLong("log-key"), help: "The log's verifier key (name+hash+base64).")
    var logKey: String

    @Option(help: "The record's leaf index (the answer's evidenceLogIndex).")
    var index: UInt64

    @Option(help: "A signed checkpoint to prove inclusion in (default: DIR/checkpoint).")
    var checkpoint: String?

    @Option(help: "The evidence archive (serve --evidence-dir) holding the record's server-signed envelope, <id>.json.")
    var archive: String?

    @Option(help: "Write the bundle here (never over an existing file) instead of stdout.")
    var out: String?

    func run() throws {
        let verifier: NoteVerifier
        do { verifier = try NoteVerifier(keyString: self.logKey) } catch { throw UsageError("--log-key: \(error.reason)") }
        let checkpointPath = self.checkpoint ?? (self.log as NSString).appendingPathComponent("checkpoint")
        let note = try InputFile.readBytes(checkpointPath)
        let checkpoint: Checkpoint
        do {
            checkpoint = try Checkpoint(body: Array(try SignedNote.open(note, verifier: verifier).utf8))
        } catch {
            throw UsageError("\(checkpointPath): not a checkpoint signed by --log-key: \(error.reason)")
        }
        guard checkpoint.origin == verifier.name else { throw UsageError("\(checkpointPath): the checkpoint's origin is not the key's name") }
        guard self.index < checkpoint.size else {
            throw UsageError("--index \(self.index): the checkpoint commits to \(checkpoint.size) leaves")
        }
        let leaf: [UInt8]
        let proof: [[UInt8]]
        do {
            let files = try TileLogDirectory(readingDirectory: self.log)
            guard files.size >= checkpoint.size, try files.root(size: checkpoint.size) == checkpoint.rootHash else {
                return try Self.fail(
                    "the log's files do not hold the tree the checkpoint commits to ('formattest evidence audit' names what differs)")
            }
            leaf = try files.entry(at: self.index)
            let width = TileLayout.width
            guard MerkleHash.leaf(leaf) == (try files.hashTile(level: 0, index: self.index / width))[Int(self.index % width)] else {
                return try Self.fail("leaf \(self.index): its record does not match the log's hash of it (altered: 'formattest evidence audit')")
            }
            proof = try files.inclusionProof(index: self.index, size: checkpoint.size)
        } catch {
            return try Self.fail("the log cannot be read: \(error)")
        }
        let registration: [UInt8]?
        do {
            registration = try Self.registration(of: leaf, index: self.index, log: self.log)
        } catch {
            return try Self.fail(error.message)
        }
        var record = EvidenceBundle.Record.leaf(leaf)
        if let archive = self.archive {
            let id = Base64URL.encode(SHA256.hash(data: leaf))
            let path = (archive as NSString).appendingPathComponent("\(id).json")
            let envelope = try InputFile.readBytes(path)
            let payload = (try? CanonicalJSON.parse(envelope))?["payload"]?.stringValue.flatMap(Base64URL.decode)
            guard payload == leaf else { return try Self.fail("\(path) is not the server-signed envelope of leaf \(self.index)") }
            record = .envelope(envelope)
        }
        let bundle = try EvidenceBundle(
            checkpoint: String(decoding: note, as: UTF8.self), index: self.index, inclusionProof: proof, record: record, registration: registration
        ).encoded()
        if let out = self.out {
            try Wrap.writeNew(bundle, to: URL(fileURLWithPath: out))
        } else {
            FileHandle.standardOutput.write(Data(bundle))
        }
    }

    private static func fail(_ message: String) throws {
        FileHandle.standardError.write(Data("not exported: \(message)\n".utf8))
        throw ExitCode(1)
    }

    private struct ExportFailure: Error {
        let message: String
    }

    /// A version-2 leaf's key registration from the log's directory, checked against the leaf's
    /// reference; nil for version 1.
    private static func registration(of leaf: [UInt8], index: UInt64, log: String) throws(ExportFailure) -> [UInt8]? {
        let id: [UInt8]
        do {
            guard let referenced = try EvidenceRecord.registrationID(inPayload: leaf) else { return nil }
            id = referenced
        } catch {
            throw ExportFailure(message: "leaf \(index) is not an evidence record: \(error.reason)")
        }
        let files = ContentAddressedDirectory(directory: (log as NSString).appendingPathComponent("registrations"))
        let path = files.path(of: id)
        let bytes: [UInt8]?
        do { bytes = try files.read(id) } catch { throw ExportFailure(message: "leaf \(index)'s key registration \(path) cannot be read: \(error)") }
        guard let bytes else {
            throw ExportFailure(message: "leaf \(index)'s key registration \(path) is missing ('formattest evidence audit' names every such leaf)")
        }
        guard KeyRegistration.id(of: bytes) == id else {
            throw ExportFailure(message: "leaf \(index)'s key registration \(path) does not hash to the record's reference (altered)")
        }
        return bytes
    }
}
