//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import AppAttest
public import Crypto
public import FormAttestForm
import Foundation
import RFC3339
import X509

/// What `formattest verify` prints when verification succeeds (`--json`: RFC 8785 bytes).
public struct VerificationReport: APIResponse {
    public static let schemaName = "VerificationReport"

    public struct CertificateSummary: Encodable, Sendable, Hashable {
        public var subject: String
        public var issuer: String
        public var notValidBefore: String
        public var notValidAfter: String
    }

    public var verified = true
    /// base64url without padding, as everywhere (docs/formats.md, Encodings).
    public var keyId: String
    public var publicKey: String
    public var appId: String
    public var environment: String?
    public var counter: UInt32
    public var osVersion: String?
    /// The attestation's receipt, base64url.
    public var receipt: String?
    /// Times to the second.
    public var receiptCheck: ReceiptCheckResponse?
    public var extensions: SignalsResponse?
    /// The credential certificate's access-control extension (1.2.840.113635.100.8.6), base64url.
    public var macosAccessControl: String?
    public var verifiedAt: String?
    public var certificateChain: [CertificateSummary]?
    /// The clientDataHash that was checked, and where it came from.
    public var clientData: CheckedClientData?

    public init(_ result: VerifiedAttestation) {
        self.keyId = Base64URL.encode(result.keyID)
        self.publicKey = result.publicKey.pemRepresentation
        self.appId = result.appID
        self.environment = result.environment.rawValue
        self.counter = result.counter
        self.osVersion = result.osVersion
        self.receipt = Base64URL.encode(result.receipt)
        self.receiptCheck = ReceiptCheckResponse(result.receiptCheck.summary, fractionDigits: 0)
        self.extensions = result.extensions.map(SignalsResponse.init)
        self.macosAccessControl = result.accessControl.map { Base64URL.encode($0) }
        self.verifiedAt = RFC3339UTC.format(result.verificationTime, fractionDigits: 0)
        self.certificateChain = result.certificateChain.map {
            CertificateSummary(
                subject: $0.subject.description,
                issuer: $0.issuer.description,
                notValidBefore: RFC3339UTC.format($0.notValidBefore, fractionDigits: 0),
                notValidAfter: RFC3339UTC.format($0.notValidAfter, fractionDigits: 0)
            )
        }
    }

    public init(_ result: VerifiedAssertion, publicKey: P256.Signing.PublicKey) {
        self.keyId = Base64URL.encode(result.keyID)
        self.publicKey = publicKey.pemRepresentation
        self.appId = result.appID
        self.counter = result.counter
        self.extensions = result.extensions.map(SignalsResponse.init)
    }

    /// The RFC 8785 text `--json` prints.
    public func jsonString() throws -> String {
        String(decoding: try self.canonicalBytes(), as: UTF8.self)
    }

    /// `key: value` lines for people.
    public var text: String {
        var lines = [
            "verified: true",
            "keyId: \(self.keyId)",
            "appId: \(self.appId)",
        ]
        if let environment { lines.append("environment: \(environment)") }
        lines.append("counter: \(self.counter)")
        if let osVersion { lines.append("osVersion: \(osVersion)") }
        if let verifiedAt { lines.append("verifiedAt: \(verifiedAt)") }
        if let receiptCheck {
            lines.append("receipt: \(receiptCheck.status)" + (receiptCheck.code.map { " (\($0): \(receiptCheck.message ?? ""))" } ?? ""))
        }
        if let extensions {
            let category = extensions.validationCategory.map { category in category.name.map { "\(category.value) (\($0))" } ?? "\(category.value)" }
            var line = "extensions: bundleVersion=\(extensions.bundleVersion ?? "-") validationCategory=\(category ?? "-")"
            if let cdHash = extensions.cdHash { line += " cdHash=\(cdHash) cdHashType=\(extensions.cdHashType.map(String.init) ?? "-")" }
            lines.append(line)
        }
        if let macosAccessControl { lines.append("macosAccessControl: \(macosAccessControl)") }
        if let clientData { lines.append(clientData.text) }
        lines.append(self.publicKey)
        return lines.joined(separator: "\n")
    }
}

/// What `formattest verify` prints when verification fails (`--json`: RFC 8785 bytes).
public struct Rejection: APIResponse {
    public static let schemaName = "Rejection"
    /// `{code, message}`, the shape of every error.
    public typealias Detail = ErrorResponse.Detail

    public var verified = false
    public var error: Detail
    public var clientData: CheckedClientData?

    public init(error: AppAttestError, clientData: CheckedClientData? = nil) {
        self.error = Detail(code: error.code.identifier, message: error.reason)
        self.clientData = clientData
    }

    public init(code: String, message: String) {
        self.error = Detail(code: code, message: message)
    }

    /// The RFC 8785 text `--json` prints.
    public func jsonString() throws -> String {
        String(decoding: try self.canonicalBytes(), as: UTF8.self)
    }

    public var text: String {
        "verified: false\nerror: \(self.error.code): \(self.error.message)" + (self.clientData.map { "\n" + $0.text } ?? "")
    }
}

/// The clientDataHash a verdict is about and its source: `hash`, `challenge`, `client-data` or
/// `form` (then the SHA-256 of the form's RFC 8785 bytes). Lowercase hex, as `--client-data-hash`
/// takes it and `sha256sum` prints it (docs/formats.md, Encodings).
public struct CheckedClientData: Encodable, Sendable, Hashable {
    public var source: String
    public var clientDataHash: String

    public init(_ clientData: ClientData) {
        switch clientData {
        case .hash: self.source = "hash"
        case .challenge: self.source = "challenge"
        case .bytes: self.source = "client-data"
        case .form: self.source = "form"
        }
        self.clientDataHash = hex(clientData.clientDataHash)
    }

    public var text: String {
        let origin =
            switch self.source {
            case "form": "SHA-256 of the form's RFC 8785 bytes"
            case "hash": "as given"
            default: "SHA-256 of the --\(self.source) bytes"
            }
        return "clientDataHash: \(self.clientDataHash) (\(origin))"
    }
}
