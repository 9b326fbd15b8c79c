//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import ArgumentParser
import FormAttestForm
import Foundation
import RFC3339
import WebAuthn
import X509

/// `--challenge B64URL | --form PATH` and the relying party, shared by both passkey commands.
struct PasskeyOptions: ParsableArguments {
    @Option(help: "The registration or authentication response: JSON in the PublicKeyCredential.toJSON() shape; '-' reads stdin.")
    var response: String

    @Option(help: "The challenge the server issued, base64url.")
    var challenge: String?

    @Option(name: .customLong("form"), help: "A JSON form; the challenge is SHA256(RFC 8785 form), as App Attest's clientDataHash.")
    var formPath: String?

    @Option(name: .customLong("origin"), help: "An accepted origin, such as https://example.com (repeatable).")
    var origins: [String] = []

    @Option(name: .customLong("rp-id"), help: "The relying party id, such as example.com.")
    var rpID: String

    @Flag(name: .customLong("require-user-verification"), help: "Refuse a response without the UV flag.")
    var requireUserVerification = false

    @Flag(name: .long, help: "Print one JSON object instead of text.")
    var json = false

    func validate() throws {
        guard (self.challenge == nil) != (self.formPath == nil) else {
            throw ValidationError("Give exactly one of --challenge and --form.")
        }
        guard !self.origins.isEmpty else {
            throw ValidationError("Give at least one --origin.")
        }
        guard !(self.response == "-" && self.formPath == "-") else {
            throw ValidationError("Only one input can be read from stdin.")
        }
    }

    /// The challenge bytes: decoded from --challenge, or SHA-256 of the form's RFC 8785 bytes
    /// (the library's ``ClientData``, the one derivation the App Attest commands use too).
    func challengeBytes() throws -> [UInt8] {
        if let text = self.challenge {
            guard let bytes = WebAuthnBase64.decode(text), !bytes.isEmpty else {
                throw UsageError("--challenge is not base64url")
            }
            return bytes
        }
        let path = self.formPath ?? "-"
        let bytes = try InputFile.readBytes(path)
        do {
            return ClientData.form(try SignedForm(jsonBytes: bytes)).clientDataHash
        } catch {
            throw UsageError("--form \(path): \(error)")
        }
    }

    func policy(trustAnchors: [X509Certificate] = []) -> WebAuthnPolicy {
        WebAuthnPolicy(
            relyingPartyID: self.rpID,
            allowedOrigins: Set(self.origins),
            requireUserVerification: self.requireUserVerification,
            trustAnchors: trustAnchors
        )
    }

    /// Prints the verdict and exits 0 (verified) or 1 (refused).
    func finish(_ verdict: Result<PasskeyReport, WebAuthnError>) throws {
        switch verdict {
        case .success(let report):
            print(self.json ? try JSONOutput.string(report) : report.text)
        case .failure(let error):
            let refusal = PasskeyRefusal(error: .init(code: error.code.identifier, message: error.reason))
            print(self.json ? try JSONOutput.string(refusal) : "rejected: \(error.code.identifier): \(error.reason)")
            throw ExitCode(1)
        }
    }
}

/// `--json` of a verified passkey: the fields that apply.
struct PasskeyReport: Encodable {
    var verified = true
    let credentialId: String
    var publicKey: String?
    let signCount: UInt32
    var format: String?
    var aaguid: String?
    let userVerified: Bool
    let backupEligible: Bool
    let backedUp: Bool
    var attestationAnchored: Bool?

    init(_ registration: VerifiedRegistration) {
        self.credentialId = WebAuthnBase64.encode(registration.credentialID)
        self.publicKey = WebAuthnBase64.encode(registration.publicKey.cborEncoded)
        self.signCount = registration.signCount
        self.format = registration.format.rawValue
        self.aaguid = registration.aaguidString
        self.userVerified = registration.userVerified
        self.backupEligible = registration.backupEligible
        self.backedUp = registration.backedUp
        self.attestationAnchored = registration.attestationAnchored
    }

    init(_ authentication: VerifiedAuthentication) {
        self.credentialId = WebAuthnBase64.encode(authentication.credentialID)
        self.signCount = authentication.signCount
        self.userVerified = authentication.userVerified
        self.backupEligible = authentication.backupEligible
        self.backedUp = authentication.backedUp
    }

    var text: String {
        var lines = ["verified: passkey \(self.format.map { "registration (\($0))" } ?? "assertion")"]
        lines.append("credential id: \(self.credentialId)")
        if let publicKey { lines.append("public key (COSE): \(publicKey)") }
        lines.append("sign count: \(self.signCount)")
        if let aaguid { lines.append("aaguid: \(aaguid)") }
        lines.append("user verified: \(self.userVerified), backup eligible: \(self.backupEligible), backed up: \(self.backedUp)")
        if let attestationAnchored { lines.append("attestation anchored: \(attestationAnchored)") }
        return lines.joined(separator: "\n")
    }
}

/// `--json` of a refusal.
struct PasskeyRefusal: Encodable {
    struct Detail: Encodable {
        let code: String
        let message: String
    }
    var verified = false
    let error: Detail
}

struct VerifyPasskeyRegistration: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "passkey-registration",
        abstract: "Verify a WebAuthn registration (W3C WebAuthn Level 3 §7.1; formats none, packed, fido-u2f, apple).",
        discussion: """
            Without --root, attestation signatures are still checked and the answer says the \
            attestation is not anchored. Exit 0 verified, 1 rejected, 2 usage.
            """
    )

    @OptionGroup var passkey: PasskeyOptions

    @Option(name: .customLong("root"), help: "A PEM trust anchor for attestation certificates (repeatable).")
    var roots: [String] = []

    @Option(help: "Check certificate validity as of this RFC 3339 time instead of now.")
    var at: String?

    func run() async throws {
        let response = try InputFile.readBytes(self.passkey.response)
        let challenge = try self.passkey.challengeBytes()
        let time = try self.at.map { try RFC3339UTC.argument($0) } ?? Date()
        let anchors = try InputFile.readCertificates(self.roots, orDefault: [])
        let verdict: Result<PasskeyReport, WebAuthnError>
        do {
            let verifier = try WebAuthnVerifier(policy: self.passkey.policy(trustAnchors: anchors))
            verdict = .success(PasskeyReport(try await verifier.verifyRegistration(json: response, challenge: challenge, at: time)))
        } catch {
            verdict = .failure(error)
        }
        try self.passkey.finish(verdict)
    }
}

struct VerifyPasskeyAssertion: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "passkey-assertion",
        abstract: "Verify a WebAuthn assertion with a stored COSE key (W3C WebAuthn Level 3 §7.2).",
        discussion: "Exit 0 verified, 1 rejected, 2 usage."
    )

    @OptionGroup var passkey: PasskeyOptions

    @Option(name: .customLong("public-key"), help: "The credential's COSE public key, base64url (as registration printed it).")
    var publicKey: String

    @Option(name: .customLong("previous-sign-count"), help: "The stored sign count; a non-zero count must be greater.")
    var previousSignCount: UInt32 = 0

    func run() async throws {
        let response = try InputFile.readBytes(self.passkey.response)
        let challenge = try self.passkey.challengeBytes()
        guard let keyBytes = WebAuthnBase64.decode(self.publicKey), !keyBytes.isEmpty else {
            throw UsageError("--public-key is not base64url")
        }
        let verdict: Result<PasskeyReport, WebAuthnError>
        do {
            let verifier = try WebAuthnVerifier(policy: self.passkey.policy())
            let result = try verifier.verifyAuthentication(
                AuthenticationResponse(json: response),
                publicKey: try CredentialPublicKey(cborEncoded: keyBytes),
                challenge: challenge,
                previousSignCount: self.previousSignCount
            )
            verdict = .success(PasskeyReport(result))
        } catch {
            verdict = .failure(error)
        }
        try self.passkey.finish(verdict)
    }
}
