//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import ArgumentParser
import Crypto
import FormAttestForm
import FormAttestResponses
import Foundation
import RFC3339

struct Verify: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Verify an App Attest attestation or assertion, or a passkey registration or assertion.",
        subcommands: [VerifyAttestation.self, VerifyAssertion.self, VerifyPasskeyRegistration.self, VerifyPasskeyAssertion.self]
    )
}

/// `--environment development|production|any`.
package enum EnvironmentChoice: String, ExpressibleByArgument, CaseIterable {
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

    /// Prints a verdict and exits 0 (verified) or 1 (rejected). Both name the clientDataHash
    /// that was checked and, for a form, that it is the hash of the form's RFC 8785 bytes.
    func finish(_ verdict: Result<VerificationReport, AppAttestError>, clientData: ClientData) throws {
        let checked = CheckedClientData(clientData)
        switch verdict {
        case .success(var report):
            report.clientData = checked
            print(self.json ? try report.jsonString() : report.text)
        case .failure(let error):
            let rejection = Rejection(error: error, clientData: checked)
            print(self.json ? try rejection.jsonString() : rejection.text)
            throw ExitCode(1)
        }
    }
}

/// The inputs and policy of an attestation check, shared by `verify attestation` and `wrap`.
struct AttestationOptions: ParsableArguments {
    @Option(help: "The attestation object: raw CBOR or base64/base64url text; '-' reads stdin.")
    var attestation: String

    @Option(name: .customLong("key-id"), help: "The keyId the app reported: base64url, or standard base64 as DCAppAttestService returns it.")
    var keyID: String

    @Option(name: .customLong("app-id"), help: "TEAMID.bundleID.")
    var appID: String

    @Option(help: "Accepted environment: development, production or any.")
    var environment: EnvironmentChoice = .any

    @Option(name: .customLong("root"), help: "A PEM trust anchor instead of Apple's root (repeatable).")
    var roots: [String] = []

    @Option(name: .customLong("receipt-root"), help: "A PEM receipt trust anchor instead of Apple Root CA - G3 (repeatable).")
    var receiptRoots: [String] = []

    @Flag(name: .customLong("require-valid-receipt"), help: "Reject the attestation when its receipt does not verify.")
    var requireValidReceipt = false

    @Option(help: "Verify as of this RFC 3339 time instead of now.")
    var at: String?

    @OptionGroup var signals: SignalPolicyOptions

    /// Verifies; an ``AppAttestError`` is a rejection, anything else a usage or I/O error.
    func verify(clientDataHash: [UInt8]) async throws -> (attestation: [UInt8], result: Result<VerifiedAttestation, AppAttestError>) {
        let attestationBytes = try InputFile.readBinaryDocument(self.attestation)
        let keyID = try InputFile.decodeBase64(self.keyID, what: "--key-id")
        let time = try self.at.map { try RFC3339UTC.argument($0) } ?? Date()
        let anchors = try InputFile.readCertificates(self.roots, orDefault: AppAttestPolicy.appleTrustAnchors)
        let receiptAnchors = try InputFile.readCertificates(self.receiptRoots, orDefault: AppAttestPolicy.appleReceiptTrustAnchors)
        var policy = AppAttestPolicy(
            appIDs: [self.appID],
            environments: self.environment.environments,
            trustAnchors: anchors,
            receiptTrustAnchors: receiptAnchors,
            requireValidReceipt: self.requireValidReceipt
        )
        try self.signals.apply(to: &policy)
        do {
            let verifier = try AppAttestVerifier(policy: policy)
            let result = try await verifier.verifyAttestation(attestationBytes, keyID: keyID, clientDataHash: clientDataHash, at: time)
            return (attestationBytes, .success(result))
        } catch {
            return (attestationBytes, .failure(error))
        }
    }
}

struct VerifyAttestation: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "attestation",
        abstract: "Verify an App Attest attestation object (Apple's steps 1-9)."
    )

    @OptionGroup var attestation: AttestationOptions
    @OptionGroup var clientData: ClientDataOptions
    @OptionGroup var output: OutputOptions

    func validate() throws {
        try self.clientData.validateOne()
        guard !(self.attestation.attestation == "-" && self.clientData.readsStandardInput) else {
            throw ValidationError("Only one input can be read from stdin.")
        }
    }

    func run() async throws {
        let clientData = try self.clientData.clientData()
        let (_, result) = try await self.attestation.verify(clientDataHash: clientData.clientDataHash)
        try self.output.finish(
            result.map(VerificationReport.init),
            clientData: clientData
        )
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

    @OptionGroup var signals: SignalPolicyOptions

    @OptionGroup var output: OutputOptions

    func validate() throws {
        guard (self.publicKey == nil) != (self.attestation == nil) else {
            throw ValidationError("Give exactly one of --public-key and --attestation.")
        }
        let stdinReaders = [self.assertion == "-", self.attestation == "-", self.clientData.readsStandardInput].filter { $0 }.count
        guard stdinReaders <= 1 else {
            throw ValidationError("Only one input can be read from stdin.")
        }
        try self.clientData.validateOne()
    }

    func run() async throws {
        let assertionBytes = try InputFile.readBinaryDocument(self.assertion)
        let clientData = try self.clientData.clientData()
        let clientDataHash = clientData.clientDataHash

        var policy = AppAttestPolicy(appIDs: [self.appID], environments: Set(AppAttestEnvironment.allCases))
        try self.signals.apply(to: &policy)

        let verdict: Result<VerificationReport, AppAttestError>
        do {
            let key = try self.attestedKey()
            let verifier = try AppAttestVerifier(policy: policy)
            let result = try verifier.verifyAssertion(
                assertionBytes,
                publicKey: key,
                clientDataHash: clientDataHash,
                previousCounter: self.previousCounter
            )
            verdict = .success(VerificationReport(result, publicKey: key))
        } catch let error as AppAttestError {
            verdict = .failure(error)
        }
        try self.output.finish(verdict, clientData: clientData)
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

/// `--client-data-hash HEX | --challenge TEXT | --client-data PATH | --form PATH`: exactly one,
/// in every command that verifies (`verify attestation`, `verify assertion`, `wrap`). The hash
/// itself is the library's ``ClientData``: one derivation for the CLI and the HTTP flows.
struct ClientDataOptions: ParsableArguments {
    @Option(name: .customLong("client-data-hash"), help: "The exact clientDataHash bytes, in hex.")
    var clientDataHashHex: String?

    @Option(help: "A challenge; clientDataHash = SHA256(UTF-8 bytes of TEXT).")
    var challenge: String?

    @Option(name: .customLong("client-data"), help: "A file; clientDataHash = SHA256(its bytes).")
    var clientDataPath: String?

    @Option(name: .customLong("form"), help: "A JSON form; clientDataHash = SHA256(RFC 8785 form), as the service computes it.")
    var formPath: String?

    static let names = "--client-data-hash, --challenge, --client-data and --form"

    /// Exactly one source must be given.
    func validateOne() throws {
        let given = [self.clientDataHashHex, self.challenge, self.clientDataPath, self.formPath].compactMap { $0 }.count
        guard given == 1 else {
            throw ValidationError("Give exactly one of \(Self.names).")
        }
    }

    /// Whether a source reads standard input.
    var readsStandardInput: Bool { self.clientDataPath == "-" || self.formPath == "-" }

    /// The client data named on the command line (a form is parsed and canonicalized here).
    func clientData() throws -> ClientData {
        if let hex = self.clientDataHashHex {
            guard let bytes = HexCoding.decode(hex) else {
                throw UsageError("--client-data-hash is not hexadecimal")
            }
            return .hash(bytes)
        }
        if let challenge = self.challenge {
            return .challenge(challenge)
        }
        if let path = self.formPath {
            let bytes = try InputFile.readBytes(path)
            do {
                return .form(try SignedForm(jsonBytes: bytes))
            } catch {
                throw UsageError("--form \(path): \(error)")
            }
        }
        return .bytes(try InputFile.readBytes(self.clientDataPath ?? "-"))
    }
}
