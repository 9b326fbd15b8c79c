//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import ArgumentParser
import CanonicalJSON
import Crypto
import FormAttestClient
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

/// Where the JWS signing key comes from: `--signing-key PEM`, else the data directory's key
/// (generated on first use, mode 0600).
struct SigningOptions: ParsableArguments {
    @Option(name: .customLong("data-dir"), help: "The data directory (signing keys live here).")
    var dataDirectory = "./formattest-data"

    @Option(name: .customLong("signing-key"), help: "A PEM P-256 private key to sign tokens with.")
    var signingKeyPath: String?

    @Option(help: "The tokens' issuer (iss).")
    var issuer = "formattest"

    @Option(help: "The tokens' audience (aud).")
    var audience = "formattest"

    var keyDirectory: SigningKeyDirectory {
        SigningKeyDirectory(directory: URL(fileURLWithPath: self.dataDirectory))
    }

    func keys() throws -> SigningKeys {
        do {
            if let path = self.signingKeyPath { return try SigningKeyDirectory.load(privateKeyPEM: path) }
            return try self.keyDirectory.loadOrCreate()
        } catch {
            throw UsageError("cannot load the signing key: \(error)")
        }
    }

    func signer() async throws -> ServerAttestationSigner {
        try await ServerAttestationSigner(keys: try self.keys(), issuer: self.issuer, audience: self.audience)
    }
}

struct Wrap: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Verify an attestation, then write it as a FIDO2 wrapper and/or a server-signed JWS.",
        discussion: """
            Nothing that fails verification is wrapped (exit 1 with the reason). The output is one \
            JSON object (RFC 8785) with a member per format: fido2Wrapper, serverAttestation, \
            packedLikeUnsafe. Batch: --batch INPUT.jsonl --out-dir DIR, one request object per line \
            with the flags' fields: attestation (base64), keyId, appId, clientDataHash (hex) | \
            challenge | form (an object), at, environment, formats, username, name.
            """
    )

    @Option(help: "The attestation object (single mode).")
    var attestation: String?
    @Option(name: .customLong("key-id"))
    var keyID: String?
    @Option(name: .customLong("app-id"))
    var appID: String?
    @Option(name: .customLong("client-data-hash"))
    var clientDataHashHex: String?
    @Option
    var challenge: String?
    @Option(name: .customLong("form"), help: "A JSON form; clientDataHash = SHA256(RFC 8785 form).")
    var formPath: String?
    @Option
    var at: String?
    @Option
    var environment: EnvironmentChoice = .any
    @Option(name: .customLong("root"), help: "A PEM trust anchor instead of Apple's root (repeatable).")
    var roots: [String] = []
    @Option(name: .customLong("format"), help: "fido2 (default), jws, packed (with --attestation-ca and --rp-id) or packed-like-unsafe (test only); repeatable.")
    var formats: [FormatChoice] = []
    @Option(help: "The JWS subject (sub); default: the keyId.")
    var username: String?
    @Option(help: "Write the output here instead of stdout (never over an existing file).")
    var out: String?

    @Option(help: "A JSON Lines file of requests.")
    var batch: String?
    @Option(name: .customLong("out-dir"), help: "Batch mode: one <name>.json per request here.")
    var outDirectory: String?

    @OptionGroup var signing: SigningOptions
    @OptionGroup var packed: PackedOptions

    func validate() throws {
        if self.formats.contains(where: { $0.format == .packed }) && self.packed.directory == nil {
            throw ValidationError("--format packed needs --attestation-ca and --rp-id.")
        }
        if self.batch != nil {
            guard self.outDirectory != nil else { throw ValidationError("--batch needs --out-dir.") }
            guard self.attestation == nil, self.out == nil else {
                throw ValidationError("--batch replaces --attestation and --out.")
            }
        } else {
            guard self.attestation != nil, self.keyID != nil, self.appID != nil else {
                throw ValidationError("Give --attestation, --key-id and --app-id (or --batch).")
            }
            let given = [self.clientDataHashHex, self.challenge, self.formPath].compactMap { $0 }.count
            guard given == 1 else { throw ValidationError("Give exactly one of --client-data-hash, --challenge and --form.") }
        }
    }

    func run() async throws {
        if let batch = self.batch, let outDirectory = self.outDirectory {
            try await self.runBatch(batch, outDirectory: outDirectory)
            return
        }
        let request = WrapRequest(
            attestation: try InputFile.readBinaryDocument(self.attestation ?? "-"),
            keyID: try InputFile.decodeBase64(self.keyID ?? "", what: "--key-id"),
            appID: self.appID ?? "",
            clientDataHash: try self.clientDataHash(),
            at: try self.at.map(RFC3339UTC.argument) ?? Date(),
            environments: self.environment.environments,
            formats: Set(self.formats.isEmpty ? [.fido2] : self.formats.map(\.format)),
            username: self.username
        )
        let formatter = TokenFormatter(signer: request.formats.contains(.jws) ? try await self.signing.signer() : nil, packed: try self.packed.packed())
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

    private func clientDataHash() throws -> [UInt8] {
        if let hex = self.clientDataHashHex {
            guard let bytes = HexCoding.decode(hex) else { throw UsageError("--client-data-hash is not hexadecimal") }
            return bytes
        }
        if let challenge = self.challenge { return Array(SHA256.hash(data: Array(challenge.utf8))) }
        do {
            return try SignedForm(jsonBytes: try InputFile.readBytes(self.formPath ?? "-")).clientDataHash
        } catch let error as FormError {
            throw UsageError("--form: \(error.description)")
        }
    }

    private func anchors() throws -> [X509Certificate] {
        try self.roots.isEmpty ? [AppleAppAttestationRoot.certificate] : self.roots.map(InputFile.readCertificate)
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

        var total = 0
        var wrapped = 0
        var failed = 0
        var failures: [Failure] = []
    }

    private func runBatch(_ path: String, outDirectory: String) async throws {
        let lines = String(decoding: try InputFile.readBytes(path), as: UTF8.self)
            .split(separator: "\n", omittingEmptySubsequences: false)
            .enumerated()
            .filter { !$0.element.trimmingCharacters(in: .whitespaces).isEmpty }
        let directory = URL(fileURLWithPath: outDirectory)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let formatter = TokenFormatter(signer: try? await self.signing.signer(), packed: try self.packed.packed())
        let anchors = try self.anchors()
        let progress = ProgressBar(total: lines.count)
        var summary = Summary()
        for (index, line) in lines {
            summary.total += 1
            let item = "line \(index + 1)"
            do {
                let (name, request) = try WrapRequest.parse(jsonLine: Array(line.utf8), defaultName: "item-\(index + 1)")
                let destination = directory.appendingPathComponent("\(name).json")
                if FileManager.default.fileExists(atPath: destination.path) {
                    throw BatchItemError(code: "exists", message: "\(destination.lastPathComponent) exists and is not overwritten")
                }
                switch try await request.run(formatter: formatter, anchors: anchors) {
                case .success(let output):
                    do {
                        try Self.writeNew(output, to: destination)
                    } catch {
                        throw BatchItemError(code: "exists", message: "\(destination.lastPathComponent) exists and is not overwritten")
                    }
                    summary.wrapped += 1
                case .failure(let error):
                    throw BatchItemError(code: error.code.identifier, message: error.reason)
                }
            } catch let error as BatchItemError {
                summary.failed += 1
                summary.failures.append(.init(item: item, code: error.code, message: error.message))
            } catch {
                summary.failed += 1
                summary.failures.append(.init(item: item, code: "invalid_request", message: "\(error)"))
            }
            progress.advance()
        }
        progress.finish()
        print(try JSONOutput.string(summary))
        if summary.failed > 0 { throw ExitCode(1) }
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

    func run(formatter: TokenFormatter, anchors: [X509Certificate]) async throws -> Result<[UInt8], AppAttest.AppAttestError> {
        let verified: VerifiedAttestation
        do {
            let verifier = try AppAttestVerifier(policy: AppAttestPolicy(appIDs: [self.appID], environments: self.environments, trustAnchors: anchors))
            verified = try await verifier.verifyAttestation(self.attestation, keyID: self.keyID, clientDataHash: self.clientDataHash, at: self.at)
        } catch let error as AppAttest.AppAttestError {
            return .failure(error)
        }
        let output = try await formatter.formats(
            self.formats,
            for: TokenFormatter.Input(
                credential: AttestedCredential(verified),
                attestationObject: self.attestation,
                authenticatorData: verified.authenticatorData.rawValue,
                clientDataHash: self.clientDataHash,
                counter: verified.counter,
                verifiedAt: self.at,
                username: self.username ?? Base64URL.encode(verified.keyID)
            )
        )
        return .success(output.canonicalBytes)
    }

    /// Parses one JSON Lines request (strictly).
    static func parse(jsonLine: [UInt8], defaultName: String) throws -> (name: String, request: WrapRequest) {
        let value = try CanonicalJSON.parse(jsonLine)
        func string(_ name: String) -> String? { value[name]?.stringValue }
        guard let attestationText = string("attestation"), let keyIDText = string("keyId"), let appID = string("appId") else {
            throw Wrap.BatchItemError(code: "invalid_request", message: "attestation, keyId and appId are required")
        }
        let clientDataHash: [UInt8]
        if let hex = string("clientDataHash") {
            guard let bytes = HexCoding.decode(hex) else { throw Wrap.BatchItemError(code: "invalid_request", message: "clientDataHash is not hex") }
            clientDataHash = bytes
        } else if let challenge = string("challenge") {
            clientDataHash = Array(SHA256.hash(data: Array(challenge.utf8)))
        } else if let form = value["form"] {
            clientDataHash = try SignedForm(value: form).clientDataHash
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
                attestation: try InputFile.decodeBase64(attestationText, what: "attestation"),
                keyID: try InputFile.decodeBase64(keyIDText, what: "keyId"),
                appID: appID,
                clientDataHash: clientDataHash,
                at: try string("at").map(RFC3339UTC.argument) ?? Date(),
                environments: environment.environments,
                formats: Set(formats),
                username: string("username")
            )
        )
    }
}

/// A one-line progress bar on a terminal's stderr; silent when stderr is not a terminal.
final class ProgressBar {
    private let total: Int
    private var done = 0
    private let enabled = isatty(STDERR_FILENO) == 1

    init(total: Int) {
        self.total = total
    }

    func advance() {
        self.done += 1
        guard self.enabled, self.total > 0 else { return }
        let width = 30
        let filled = width * self.done / self.total
        let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
        FileHandle.standardError.write(Data("\r[\(bar)] \(self.done)/\(self.total)".utf8))
    }

    func finish() {
        if self.enabled { FileHandle.standardError.write(Data("\n".utf8)) }
    }
}
