//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import Crypto
import FormAttestForm
import Foundation
import RFC3339
import X509

/// What `verify` prints when verification succeeds.
struct VerificationReport: Encodable {
    /// The iOS 27 signals: `validationCategory` `{value, name}` (`name` null for a number without
    /// a published name), `bundleVersion`, `cdHash` (hex) and `cdHashType` when present.
    struct Extensions: Encodable {
        struct Category: Encodable {
            var value: UInt32
            var name: String?

            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: CodingKeys.self)
                try container.encode(self.value, forKey: .value)
                try container.encode(self.name, forKey: .name)  // null when unnamed: a fixed shape
            }

            enum CodingKeys: String, CodingKey { case value, name }
        }

        var bundleVersion: String?
        var validationCategory: Category?
        var cdHash: String?
        var cdHashType: UInt32?
        var otherKeys: [String]
    }

    struct CertificateSummary: Encodable {
        var subject: String
        var issuer: String
        var notValidBefore: String
        var notValidAfter: String
    }

    var verified = true
    /// base64url without padding, as everywhere (docs/formats.md, Encodings).
    var keyId: String
    var publicKey: String
    var appId: String
    var environment: String?
    var counter: UInt32
    var osVersion: String?
    var receipt: String?
    var receiptCheck: ReceiptCheck.Summary?
    var extensions: Extensions?
    /// The credential certificate's access-control extension (1.2.840.113635.100.8.6), base64.
    var macosAccessControl: String?
    var verifiedAt: String?
    var certificateChain: [CertificateSummary]?
    /// The clientDataHash that was checked, and where it came from.
    var clientData: CheckedClientData?

    init(_ result: VerifiedAttestation) throws {
        self.keyId = Base64URL.encode(result.keyID)
        self.publicKey = result.publicKey.pemRepresentation
        self.appId = result.appID
        self.environment = result.environment.rawValue
        self.counter = result.counter
        self.osVersion = result.osVersion
        self.receipt = Data(result.receipt).base64EncodedString()
        self.receiptCheck = result.receiptCheck.summary
        self.extensions = result.extensions.map(Self.extensions)
        self.macosAccessControl = result.accessControl.map { Data($0).base64EncodedString() }
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

    init(_ result: VerifiedAssertion, publicKey: P256.Signing.PublicKey) throws {
        self.keyId = Base64URL.encode(result.keyID)
        self.publicKey = publicKey.pemRepresentation
        self.appId = result.appID
        self.counter = result.counter
        self.extensions = result.extensions.map(Self.extensions)
    }

    private static func extensions(_ extensions: AuthenticatorExtensions) -> Extensions {
        Extensions(
            bundleVersion: extensions.bundleVersion,
            validationCategory: extensions.validationCategory.map { Extensions.Category(value: $0.rawValue, name: $0.name) },
            cdHash: extensions.cdHash.map(HexCoding.encode),
            cdHashType: extensions.cdHashType,
            otherKeys: extensions.additionalEntries.keys.sorted()
        )
    }

    func jsonString() throws -> String {
        try JSONOutput.string(self)
    }

    /// `key: value` lines for people.
    var text: String {
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

/// What `verify` prints when verification fails.
struct Rejection: Encodable {
    struct Detail: Encodable {
        var code: String
        var message: String
    }

    var verified = false
    var error: Detail
    var clientData: CheckedClientData?

    init(error: AppAttestError, clientData: CheckedClientData? = nil) {
        self.error = Detail(code: error.code.identifier, message: error.reason)
        self.clientData = clientData
    }

    init(code: String, message: String) {
        self.error = Detail(code: code, message: message)
    }

    func jsonString() throws -> String {
        try JSONOutput.string(self)
    }

    var text: String {
        "verified: false\nerror: \(self.error.code): \(self.error.message)" + (self.clientData.map { "\n" + $0.text } ?? "")
    }
}

/// The clientDataHash a verdict is about (hex) and its source: `hash`, `challenge`,
/// `client-data` or `form` (then the SHA-256 of the form's RFC 8785 bytes).
struct CheckedClientData: Encodable {
    var source: String
    var clientDataHash: String

    init(_ clientData: ClientData) {
        switch clientData {
        case .hash: self.source = "hash"
        case .challenge: self.source = "challenge"
        case .bytes: self.source = "client-data"
        case .form: self.source = "form"
        }
        self.clientDataHash = HexCoding.encode(clientData.clientDataHash)
    }

    var text: String {
        let origin = switch self.source {
        case "form": "SHA-256 of the form's RFC 8785 bytes"
        case "hash": "as given"
        default: "SHA-256 of the --\(self.source) bytes"
        }
        return "clientDataHash: \(self.clientDataHash) (\(origin))"
    }
}

public enum JSONOutput {
    public static func string(_ value: some Encodable) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .rfc3339UTC(fractionDigits: 0)
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }
}
