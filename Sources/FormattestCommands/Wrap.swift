//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import ArgumentParser
import CanonicalJSON
import FormAttestForm
import FormAttestTokens
import Foundation
import RFC3339

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `--format`, as a command-line value.
struct FormatChoice: ExpressibleByArgument {
    let format: TokenFormat

    init?(argument: String) {
        guard let format = TokenFormat(rawValue: argument) else { return nil }
        self.format = format
    }

    static var allValueStrings: [String] { TokenFormat.allCases.map(\.rawValue) }
}

/// Where the JWS signing key comes from: `--signing-key PEM`, else the data directory's key.
/// Commands that sign or show keys never create one (``existingKeys()``); `keys generate`
/// creates it. `serve` reads the same four settings into a ``SigningSource`` directly, and creates
/// the data directory's key on its first start (``SigningSource/keys()``).
struct SigningOptions: ParsableArguments {
    @Option(name: .customLong("data-dir"), help: "The data directory (signing keys live here).")
    var dataDirectory = "./formattest-data"

    @Option(name: .customLong("signing-key"), help: "A PEM P-256 private key (PKCS#8 or SEC1 'EC PRIVATE KEY') to sign tokens with.")
    var signingKeyPath: String?

    @Option(help: "The tokens' issuer (iss).")
    var issuer = "formattest"

    @Option(help: "The tokens' audience (aud).")
    var audience = "formattest"

    var keyDirectory: SigningKeyDirectory { self.source.keyDirectory }

    /// The keys that exist: a missing, unreadable or unusable key is a one-line usage error that
    /// names the file and the command that creates a key. Nothing is created.
    func existingKeys() throws -> SigningKeys {
        try self.source.existingKeys()
    }

    /// A signer with the existing keys (see ``existingKeys()``).
    func signer() throws -> ServerAttestationSigner {
        try self.source.signer()
    }

    /// The options as a value that crosses tasks (a batch's workers read the key when a line first asks for jws).
    var source: SigningSource {
        SigningSource(dataDirectory: self.dataDirectory, signingKeyPath: self.signingKeyPath, issuer: self.issuer, audience: self.audience)
    }
}

/// Where the signing key comes from, and the tokens' issuer and audience: ``SigningOptions``'
/// values, or `serve`'s `data-dir`, `signing-key`, `issuer` and `audience` settings.
package struct SigningSource: Sendable {
    package var dataDirectory: String
    package var signingKeyPath: String?
    package var issuer: String
    package var audience: String

    var keyDirectory: SigningKeyDirectory {
        SigningKeyDirectory(directory: URL(fileURLWithPath: self.dataDirectory))
    }

    /// The keys, the data directory's created on first use (the service's start).
    func keys() throws -> SigningKeys {
        if self.signingKeyPath != nil { return try self.existingKeys() }
        do {
            return try self.keyDirectory.loadOrCreate()
        } catch {
            throw UsageError("cannot load the signing key: \(error)")
        }
    }

    /// The keys that exist: a missing, unreadable or unusable key is a one-line usage error that
    /// names the file and the command that creates a key. Nothing is created.
    func existingKeys() throws -> SigningKeys {
        do {
            if let path = self.signingKeyPath { return try SigningKeyDirectory.load(privateKeyPEM: path) }
            return try SigningKeyDirectory(directory: URL(fileURLWithPath: self.dataDirectory)).load()
        } catch let error where error.isMissing {
            let create =
                self.signingKeyPath.map { "formattest keys generate --signing-key \($0)" }
                ?? "formattest keys generate --data-dir \(self.dataDirectory)"
            throw UsageError("signing key: \(error) (create one with '\(create)')")
        } catch {
            throw UsageError("signing key: \(error)")
        }
    }

    /// A signer with the existing keys (see ``existingKeys()``).
    func signer() throws -> ServerAttestationSigner {
        ServerAttestationSigner(keys: try self.existingKeys(), issuer: self.issuer, audience: self.audience)
    }
}

extension SigningSource {
    /// `serve`'s settings: each was checked (text) and defaulted by its table entry, and no check
    /// spans them.
    package init(_ settings: ServeSettings.Resolved) {
        self.init(
            dataDirectory: settings.text("data-dir"), signingKeyPath: settings.textIfSet("signing-key"), issuer: settings.text("issuer"),
            audience: settings.text("audience"))
    }
}

struct Wrap: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Verify an attestation, then write it as a FIDO2 wrapper and/or a server-signed JWS.",
        discussion: """
            Nothing that fails verification is wrapped (exit 1 with the reason). The output is one \
            JSON object (RFC 8785) with a member per format: fido2Wrapper, serverAttestation, \
            packedLikeUnsafe. The jws format needs an existing signing key ('keys generate'). \
            Batch: --batch INPUT.jsonl with --out FILE|- (JSON Lines records) or --out-dir DIR \
            (<name>.json files), one request object per line with the flags' fields: attestation \
            (base64), keyId, appId, clientDataHash (hex) | challenge | form (an object), at, \
            environment, formats, username, name. The file is streamed (any size; '-' reads stdin), \
            each line at most --max-line-bytes, verified on every core and written in input order; \
            every line is its own item: a bad, over-long or refused line is reported by its number \
            and the others are still wrapped; the exit status is 1 when any line failed. Keys are \
            read only when a line asks for jws. Durability: --out is flushed to disk every 1000 \
            records or second and at the end; --out-dir files are made durable 256 at a time (one \
            syncfs) before their journal records and final names, never one fsync per file. After \
            a crash, the same command resumes: each record already written is checked (line number, \
            SHA-256 of the line, the file's SHA-256) and skipped, a torn last record is redone. \
            Progress (lines, rate, errors, time left) is drawn on stderr when it is a terminal.
            """
    )

    @Option(help: "The attestation object (single mode).")
    var attestation: String?
    @Option(name: .customLong("key-id"))
    var keyID: String?
    @Option(name: .customLong("app-id"))
    var appID: String?
    @OptionGroup var clientData: ClientDataOptions
    @Option
    var at: String?
    @Option
    var environment: EnvironmentChoice = .any
    @Option(name: .customLong("root"), help: "A PEM trust anchor instead of Apple's root (repeatable).")
    var roots: [String] = []
    @Option(
        name: .customLong("format"),
        help: "fido2 (default), jws, packed (with --attestation-ca and --rp-id) or packed-like-unsafe (test only); repeatable.")
    var formats: [FormatChoice] = []
    @Option(help: "The JWS subject (sub); default: the keyId.")
    var username: String?
    @Option(
        help: """
            Write the output here instead of stdout (never over an existing file). Batch mode: the JSON Lines \
            records, one per line in input order ('-': stdout), flushed to disk every 1000 records or second and \
            at the end; rerun the same command after a crash to resume after the last complete record.
            """
    )
    var out: String?

    @Option(help: "A JSON Lines file of requests.")
    var batch: String?
    @Option(
        name: .customLong("out-dir"),
        help: """
            Batch mode: one <name>.json per request here, never over an existing file. Files are made durable \
            256 at a time (one syncfs, no fsync per file) before their journal records (.formattest-batch.jsonl) \
            and final names; rerun the same command after a crash to resume.
            """
    )
    var outDirectory: String?
    @Option(name: .customLong("max-line-bytes"), help: "Batch mode: the longest line accepted, in bytes.")
    var maximumLineBytes = Wrap.defaultMaximumLineBytes

    /// 1 MiB: an attestation line is about 10 KB, a form at most 64 KiB.
    static let defaultMaximumLineBytes = 1 << 20

    @OptionGroup var signing: SigningOptions
    @OptionGroup var packed: PackedOptions

    func validate() throws {
        if self.formats.contains(where: { $0.format == .packed }) && self.packed.directory == nil {
            throw ValidationError("--format packed needs --attestation-ca and --rp-id.")
        }
        if self.batch != nil {
            guard (self.outDirectory != nil) != (self.out != nil) else {
                throw ValidationError("--batch needs one of --out-dir DIR and --out FILE|-.")
            }
            guard self.attestation == nil else { throw ValidationError("--batch replaces --attestation.") }
            guard self.maximumLineBytes > 0 else { throw ValidationError("--max-line-bytes must be positive.") }
        } else {
            guard self.attestation != nil, self.keyID != nil, self.appID != nil else {
                throw ValidationError("Give --attestation, --key-id and --app-id (or --batch).")
            }
            try self.clientData.validateOne()
            guard !(self.attestation == "-" && self.clientData.readsStandardInput) else {
                throw ValidationError("Only one input can be read from stdin.")
            }
        }
    }

    func run() async throws {
        if let batch = self.batch {
            try await self.runBatch(batch)
            return
        }
        let request = WrapRequest(
            attestation: try InputFile.readBinaryDocument(self.attestation ?? "-"),
            keyID: try InputFile.decodeBase64(self.keyID ?? "", what: "--key-id"),
            appID: self.appID ?? "",
            clientDataHash: try self.clientData.clientData().clientDataHash,
            at: try self.at.map(RFC3339UTC.argument) ?? Date(),
            environments: self.environment.environments,
            formats: Set(self.formats.isEmpty ? [.fido2] : self.formats.map(\.format)),
            username: self.username
        )
        let formatter = TokenFormatter(signer: request.formats.contains(.jws) ? try self.signing.signer() : nil, packed: try self.packed.packed())
        switch try await request.run(formatter: formatter, anchors: try self.anchors()) {
        case .success(let output):
            if let out = self.out {
                try Self.writeNew(output, to: URL(fileURLWithPath: out))
            } else {
                FileHandle.standardOutput.write(Data(output + [0x0A]))
            }
        case .failure(let error):
            FileHandle.standardError.write(Data("not wrapped: \(error.code.identifier): \(error.reason)\n".utf8))
            throw ExitCode(1)
        }
    }

    private func anchors() throws -> [X509Certificate] {
        try InputFile.readCertificates(self.roots, orDefault: AppAttestPolicy.appleTrustAnchors)
    }

    /// Writes a file that must not exist yet (O_EXCL: an existing file is never replaced).
    static func writeNew(_ bytes: [UInt8], to url: URL) throws {
        do {
            try Data(bytes).write(to: url, options: .withoutOverwriting)
        } catch {
            throw UsageError("\(url.path) exists or cannot be created; it is not overwritten")
        }
    }

    // MARK: - Batch

    struct Summary: Encodable {
        struct Failure: Encodable {
            var item: String
            var code: String
            var message: String
        }

        /// The failures listed at most: the rest are counted in ``failuresNotListed`` (a batch of
        /// millions of failing lines must not hold them all in memory).
        static let maximumFailuresListed = 1000

        var total = 0
        var wrapped = 0
        var failed = 0
        var failures: [Failure] = []
        /// Lines an earlier run already did (checked, then skipped); counted in total, wrapped, failed.
        var resumed = 0
        var failuresNotListed: Int?

        mutating func add(_ record: BatchRecord, resumed: Bool) {
            self.total += 1
            if resumed { self.resumed += 1 }
            guard case .error(let code, let message) = record.outcome else {
                self.wrapped += 1
                return
            }
            self.failed += 1
            if self.failures.count < Self.maximumFailuresListed {
                self.failures.append(Failure(item: "line \(record.line)", code: code, message: message))
            } else {
                self.failuresNotListed = (self.failuresNotListed ?? 0) + 1
            }
        }
    }

    /// Streams the JSON Lines file through ``BatchPipeline``: lines are verified on every core,
    /// written in input order, and memory is bounded by the pipeline's window whatever the file's
    /// size. A rerun over the same input and output first walks the records an earlier run wrote,
    /// in step with the input, checking each (same line number, same SHA-256 of the line, and for
    /// --out-dir the file's SHA-256), and does only what is left.
    private func runBatch(_ path: String) async throws {
        var reader = try JSONLinesReader(path: path, maximumLineBytes: self.maximumLineBytes)
        let output: any BatchOutput
        var previous: BatchRecordReader?
        let recordsPath: String
        if let out = self.out {
            recordsPath = out
            previous = try (out == "-" ? nil : BatchRecordReader(path: out))
            output = try BatchLinesOutput(path: out)
        } else {
            let directory = self.outDirectory ?? "."
            do {
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            } catch {
                throw UsageError("cannot create \(directory)")
            }
            recordsPath = BatchDirectoryOutput.journalPath(directory)
            previous = try BatchRecordReader(path: recordsPath)
            output = try BatchDirectoryOutput(directory: directory)
        }
        let packed = try self.packed.packed()
        let source = self.signing.source
        let context = BatchContext(
            unsigned: TokenFormatter(signer: nil, packed: packed),
            signed: SignerCache(load: { TokenFormatter(signer: try source.signer(), packed: packed) }),
            anchors: try self.anchors(),
            maximumLineBytes: self.maximumLineBytes
        )
        let progress = BatchProgress(totalBytes: reader.totalBytes)
        var summary = Summary()
        var done = 0

        /// Whether `line` is one an earlier run recorded (checked); `false` once its records ran out.
        func alreadyDone(_ line: JSONLinesReader.Line) throws -> Bool {
            guard var records = previous else { return false }
            let identity: String?
            switch line.content {
            case .bytes(let bytes): identity = BatchRecord.identity(of: bytes)
            case .tooLong: identity = nil
            case .blank: return true  // not an item: no record
            }
            guard let record = try records.next() else {
                try Self.checkTail(records, path: recordsPath)
                try output.prepareAppend(at: records.validEnd)
                previous = nil
                return false
            }
            previous = records
            guard record.line == line.number, record.input == identity else {
                throw UsageError(
                    "\(recordsPath) was written for another input: its record for line \(record.line) does not match line \(line.number) of \(path) (same input and output to resume; a new output otherwise)"
                )
            }
            try output.check(record)
            summary.add(record, resumed: true)
            return true
        }

        try await BatchPipeline(context: context, window: BatchPipeline.defaultWindow()).run(
            next: {
                while let line = try reader.next() {
                    if case .blank = line.content { continue }
                    if try alreadyDone(line) { continue }
                    return line
                }
                if var records = previous {
                    if let extra = try records.next() {
                        throw UsageError(
                            "\(recordsPath) holds a record for line \(extra.line), beyond \(path)'s last line: it was written for another input")
                    }
                    try Self.checkTail(records, path: recordsPath)
                    try output.prepareAppend(at: records.validEnd)
                    previous = nil
                }
                return nil
            },
            emit: { record in
                let written = try output.write(record)
                summary.add(written, resumed: false)
                done += 1
                progress.update(done: done, resumed: summary.resumed, errors: summary.failed, bytes: reader.bytesRead)
            }
        )
        try output.finish()
        progress.update(done: done, resumed: summary.resumed, errors: summary.failed, bytes: reader.bytesRead, force: true)
        progress.finish()
        let text = try JSONOutput.string(summary) + "\n"
        // With --out -, stdout is the records: the summary goes to stderr.
        if self.out == "-" {
            FileHandle.standardError.write(Data(text.utf8))
        } else {
            FileHandle.standardOutput.write(Data(text.utf8))
        }
        if summary.failed > 0 { throw ExitCode(1) }
    }

    /// A torn last record is cut off and its line done again; bytes that do not even begin as a
    /// record are not this command's, and are never cut off.
    private static func checkTail(_ records: BatchRecordReader, path: String) throws {
        guard records.tornBytes == 0 || records.tornLooksLikeRecord else {
            throw UsageError("\(path) ends with \(records.tornBytes) bytes that are not a batch record; it is not overwritten")
        }
    }

    struct BatchItemError: Error {
        var code: String
        var message: String
    }
}

/// One wrap: verify, then format. Shared by single and batch mode.
struct WrapRequest {
    var attestation: [UInt8]
    var keyID: [UInt8]
    var appID: String
    var clientDataHash: [UInt8]
    var at: Date
    var environments: Set<AppAttestEnvironment>
    var formats: Set<TokenFormat>
    var username: String?

    /// - Parameter verifiers: a batch's verifiers, shared by its lines (one per app id and
    ///   environments, so that a verified intermediate is not verified again for every line).
    func run(formatter: TokenFormatter, anchors: [X509Certificate], verifiers: VerifierCache? = nil) async throws -> Result<[UInt8], AppAttestError> {
        let verifier: AppAttestVerifier
        do {
            if let verifiers {
                verifier = try verifiers.verifier(appID: self.appID, environments: self.environments, anchors: anchors)
            } else {
                verifier = try AppAttestVerifier(
                    policy: AppAttestPolicy(appIDs: [self.appID], environments: self.environments, trustAnchors: anchors))
            }
        } catch {
            return .failure(error)
        }
        return try await formatter.verifyThenFormat(
            self.formats, attestation: self.attestation, keyID: self.keyID, clientDataHash: self.clientDataHash, verifier: verifier, at: self.at,
            username: self.username
        ).map(\.canonicalBytes)
    }

    /// Parses one JSON Lines request (strictly).
    static func parse(jsonLine: [UInt8], defaultName: String) throws -> (name: String, request: WrapRequest) {
        let value = try CanonicalJSON.parse(jsonLine)
        func string(_ name: String) -> String? { value[name]?.stringValue }
        func utf8(_ name: String) -> [UInt8]? {
            guard case .string(let text) = value[name] else { return nil }
            return text.utf8
        }
        guard let attestationText = utf8("attestation"), let keyIDText = utf8("keyId"), let appID = string("appId") else {
            throw Wrap.BatchItemError(code: "invalid_request", message: "attestation, keyId and appId are required")
        }
        let clientData: ClientData
        if let hex = string("clientDataHash") {
            guard let bytes = HexCoding.decode(hex) else { throw Wrap.BatchItemError(code: "invalid_request", message: "clientDataHash is not hex") }
            clientData = .hash(bytes)
        } else if let challenge = string("challenge") {
            clientData = .challenge(challenge)
        } else if let form = value["form"] {
            clientData = .form(try SignedForm(value: form))
        } else {
            throw Wrap.BatchItemError(code: "invalid_request", message: "one of clientDataHash, challenge and form is required")
        }
        var formats: [TokenFormat] = [.fido2]
        if case .array(let items) = value["formats"] {
            formats = try items.map { item in
                guard let name = item.stringValue, let format = TokenFormat(rawValue: name) else {
                    throw Wrap.BatchItemError(code: "invalid_request", message: "unknown format")
                }
                return format
            }
        }
        let environment = string("environment").flatMap(EnvironmentChoice.init(rawValue:)) ?? .any
        let name = string("name") ?? defaultName
        guard !name.contains("/"), !name.hasPrefix(".") else {
            throw Wrap.BatchItemError(code: "invalid_request", message: "name must be a plain file name")
        }
        return (
            name,
            WrapRequest(
                attestation: try InputFile.decodeBase64(utf8: attestationText, what: "attestation"),
                keyID: try InputFile.decodeBase64(utf8: keyIDText, what: "keyId"),
                appID: appID,
                clientDataHash: clientData.clientDataHash,
                at: try string("at").map(RFC3339UTC.argument) ?? Date(),
                environments: environment.environments,
                formats: Set(formats),
                username: string("username")
            )
        )
    }
}

/// JSON Lines read from a file or stdin in 64 KiB chunks, one line at a time. A line longer than
/// the limit is skipped to its end without being kept and reported as ``Line/Content/tooLong``.
struct JSONLinesReader {
    struct Line {
        enum Content {
            case bytes([UInt8])
            case blank
            case tooLong
        }

        /// 1-based, counting every line of the file.
        var number: Int
        var content: Content
    }

    private let handle: FileHandle
    private let closesHandle: Bool
    private let maximumLineBytes: Int
    private var buffer: [UInt8] = []
    private var start = 0
    private var skipping = false
    private var atEnd = false
    private var number = 0
    /// Bytes read so far.
    private(set) var bytesRead = 0
    /// The file's size, when it is a regular file.
    let totalBytes: Int?

    init(path: String, maximumLineBytes: Int) throws {
        self.maximumLineBytes = maximumLineBytes
        if path == "-" {
            self.handle = FileHandle.standardInput
            self.closesHandle = false
            self.totalBytes = nil
        } else {
            guard let handle = FileHandle(forReadingAtPath: path) else { throw UsageError("cannot read \(path)") }
            self.handle = handle
            self.closesHandle = true
            let attributes = try? FileManager.default.attributesOfItem(atPath: path)
            self.totalBytes = attributes?[.type] as? FileAttributeType == .typeRegular ? (attributes?[.size] as? Int) : nil
        }
    }

    /// The next line, or `nil` at the end of the input.
    mutating func next() throws -> Line? {
        while true {
            if let newline = self.buffer[self.start...].firstIndex(of: 0x0A) {
                let content = Array(self.buffer[self.start..<newline])
                self.start = newline + 1
                return self.line(content)
            }
            if self.buffer.count - self.start > self.maximumLineBytes {
                // The line is already too long: forget it and skip to its end.
                self.skipping = true
                self.buffer.removeAll(keepingCapacity: true)
                self.start = 0
            }
            if self.atEnd {
                guard self.start < self.buffer.count || self.skipping else {
                    if self.closesHandle { try? self.handle.close() }
                    return nil
                }
                let content = Array(self.buffer[self.start...])
                self.buffer = []
                self.start = 0
                return self.line(content)
            }
            if self.start > 0 {
                self.buffer.removeFirst(self.start)
                self.start = 0
            }
            let chunk: Data?
            do {
                chunk = try self.handle.read(upToCount: 64 * 1024)
            } catch {
                throw UsageError("cannot read the batch after line \(self.number)")
            }
            guard let chunk, !chunk.isEmpty else {
                self.atEnd = true
                continue
            }
            self.bytesRead += chunk.count
            self.buffer += chunk
        }
    }

    private mutating func line(_ content: [UInt8]) -> Line {
        self.number += 1
        if self.skipping || content.count > self.maximumLineBytes {
            self.skipping = false
            return Line(number: self.number, content: .tooLong)
        }
        let blank = content.allSatisfy { $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }
        return Line(number: self.number, content: blank ? .blank : .bytes(content))
    }
}
