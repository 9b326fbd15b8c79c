//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import ArgumentParser
import Crypto
import Foundation

struct Verify: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Verify an attestation or an assertion.",
        subcommands: [VerifyAttestation.self, VerifyAssertion.self]
    )
}

/// `--environment development|production|any`.
enum EnvironmentChoice: String, ExpressibleByArgument, CaseIterable {
    case development, production, any

    var environments: Set<AppAttestEnvironment> {
        switch self {
        case .development: return [.development]
        case .production: return [.production]
        case .any: return Set(AppAttestEnvironment.allCases)
        }
    }
}

/// `--json` and the printing of a verdict, shared by both verify commands.
struct OutputOptions: ParsableArguments {
    @Flag(name: .long, help: "Print one JSON object instead of text.")
    var json = false

    /// Prints a verdict and exits 0 (verified) or 1 (rejected).
    func finish(_ verdict: Result<VerificationReport, AppAttestError>) throws {
        switch verdict {
        case .success(let report):
            print(self.json ? try report.jsonString() : report.text)
        case .failure(let error):
            let rejection = Rejection(error: error)
            print(self.json ? try rejection.jsonString() : rejection.text)
            throw ExitCode(1)
        }
    }
}

struct VerifyAttestation: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "attestation",
        abstract: "Verify an App Attest attestation object (Apple's steps 1-9)."
    )

    @Option(help: "The attestation object: raw CBOR or base64/base64url text; '-' reads stdin.")
    var attestation: String

    @Option(name: .customLong("key-id"), help: "The keyId the app reported, base64 or base64url.")
    var keyID: String

    @Option(name: .customLong("app-id"), help: "TEAMID.bundleID.")
    var appID: String

    @OptionGroup var clientData: ClientDataOptions

    @Option(help: "Accepted environment: development, production or any.")
    var environment: EnvironmentChoice = .any

    @Option(name: .customLong("root"), help: "A PEM trust anchor instead of Apple's root (repeatable).")
    var roots: [String] = []

    @Option(help: "Verify as of this RFC 3339 time instead of now.")
    var at: String?

    @OptionGroup var output: OutputOptions

    func validate() throws {
        try self.clientData.validate(allowClientDataFile: false)
    }

    func run() async throws {
        let attestationBytes = try InputFile.readBinaryDocument(self.attestation)
        let keyID = try InputFile.decodeBase64(self.keyID, what: "--key-id")
        let clientDataHash = try self.clientData.clientDataHash()
        let time = try self.at.map { try RFC3339.parse($0) } ?? Date()
        let anchors = try self.roots.isEmpty ? [AppleAppAttestationRoot.certificate] : self.roots.map(InputFile.readCertificate)

        let verdict: Result<VerificationReport, AppAttestError>
        do {
            let verifier = try AppAttestVerifier(
                policy: AppAttestPolicy(appIDs: [self.appID], environments: self.environment.environments, trustAnchors: anchors)
            )
            let result = try await verifier.verifyAttestation(
                attestationBytes,
                keyID: keyID,
                clientDataHash: clientDataHash,
                at: time
            )
            verdict = .success(try VerificationReport(result))
        } catch let error as AppAttestError {
            verdict = .failure(error)
        }
        try self.output.finish(verdict)
    }
}

struct VerifyAssertion: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "assertion",
        abstract: "Verify an App Attest assertion with an attested key.",
        discussion: """
            With --attestation, the key is read from the attestation's credential certificate; the \
            attestation itself is not verified again (use 'verify attestation' for that).
            """
    )

    @Option(help: "The assertion: raw CBOR or base64/base64url text; '-' reads stdin.")
    var assertion: String

    @Option(name: .customLong("public-key"), help: "The attested key as a PEM public key.")
    var publicKey: String?

    @Option(help: "An attestation object whose credential certificate holds the key.")
    var attestation: String?

    @Option(name: .customLong("app-id"), help: "TEAMID.bundleID.")
    var appID: String

    @OptionGroup var clientData: ClientDataOptions

    @Option(name: .customLong("previous-counter"), help: "The stored counter; the assertion's must be greater.")
    var previousCounter: UInt32 = 0

    @OptionGroup var output: OutputOptions

    func validate() throws {
        guard (self.publicKey == nil) != (self.attestation == nil) else {
            throw ValidationError("Give exactly one of --public-key and --attestation.")
        }
        guard !(self.assertion == "-" && self.attestation == "-") else {
            throw ValidationError("Only one input can be read from stdin.")
        }
        try self.clientData.validate(allowClientDataFile: true)
    }

    func run() async throws {
        let assertionBytes = try InputFile.readBinaryDocument(self.assertion)
        let clientDataHash = try self.clientData.clientDataHash()

        let verdict: Result<VerificationReport, AppAttestError>
        do {
            let key = try self.attestedKey()
            let verifier = try AppAttestVerifier(
                policy: AppAttestPolicy(appIDs: [self.appID], environments: Set(AppAttestEnvironment.allCases))
            )
            let result = try verifier.verifyAssertion(
                assertionBytes,
                publicKey: key,
                clientDataHash: clientDataHash,
                previousCounter: self.previousCounter
            )
            verdict = .success(try VerificationReport(result, publicKey: key))
        } catch let error as AppAttestError {
            verdict = .failure(error)
        }
        try self.output.finish(verdict)
    }

    /// The key from --public-key, or from the credential certificate of --attestation.
    private func attestedKey() throws -> P256.Signing.PublicKey {
        if let path = self.publicKey {
            let pem = try InputFile.readText(path)
            do {
                return try P256.Signing.PublicKey(pemRepresentation: pem)
            } catch {
                throw AppAttestError(code: .invalidPublicKey, reason: "\(path) is not a PEM P-256 public key")
            }
        }
        // validate() guarantees one of the two options.
        let object = try AttestationObject(cborEncoded: try InputFile.readBinaryDocument(self.attestation ?? "-"))
        return try object.statement.unverifiedCredentialPublicKey()
    }
}

/// `--client-data-hash HEX | --challenge TEXT | --client-data PATH`: exactly one.
struct ClientDataOptions: ParsableArguments {
    @Option(name: .customLong("client-data-hash"), help: "The exact clientDataHash bytes, in hex.")
    var clientDataHashHex: String?

    @Option(help: "A challenge; clientDataHash = SHA256(UTF-8 bytes of TEXT).")
    var challenge: String?

    @Option(name: .customLong("client-data"), help: "A file; clientDataHash = SHA256(its bytes).")
    var clientDataPath: String?

    func validate(allowClientDataFile: Bool) throws {
        let given = [self.clientDataHashHex, self.challenge, self.clientDataPath].compactMap { $0 }.count
        if !allowClientDataFile, self.clientDataPath != nil {
            throw ValidationError("--client-data is not accepted here; use --client-data-hash or --challenge.")
        }
        guard given == 1 else {
            throw ValidationError(
                allowClientDataFile
                    ? "Give exactly one of --client-data-hash, --challenge and --client-data."
                    : "Give exactly one of --client-data-hash and --challenge."
            )
        }
    }

    func clientDataHash() throws -> [UInt8] {
        if let hex = self.clientDataHashHex {
            guard let bytes = HexCoding.decode(hex) else {
                throw UsageError("--client-data-hash is not hexadecimal")
            }
            return bytes
        }
        if let challenge = self.challenge {
            return Array(SHA256.hash(data: Array(challenge.utf8)))
        }
        return Array(SHA256.hash(data: try InputFile.readBytes(self.clientDataPath ?? "-")))
    }
}
