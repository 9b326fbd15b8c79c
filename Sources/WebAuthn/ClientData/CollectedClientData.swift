//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
public import Crypto

/// The client data a browser (or an app) collected and the authenticator signed (WebAuthn §5.8.1).
///
/// The exact bytes are kept: the verifier hashes what it received and never re-serializes what
/// it verifies. They are parsed once, strictly (the project's RFC 8785 parser: duplicate members,
/// ill-formed UTF-8, lone surrogates and control characters are refused), and members the verifier
/// does not know (`tokenBinding`, `other_keys_can_be_added_here`, ...) are ignored, as the spec asks.
public struct CollectedClientData: Sendable, Hashable {
    /// The exact clientDataJSON bytes.
    public let rawValue: [UInt8]
    /// `webauthn.create` or `webauthn.get` (checked by the verifier, not here).
    public let type: String
    /// The challenge as its base64url text, exactly as the client wrote it.
    public let challenge: String
    /// The origin of the caller.
    public let origin: String
    /// `crossOrigin`, `false` when absent.
    public let crossOrigin: Bool
    /// `topOrigin`, when present.
    public let topOrigin: String?

    /// SHA-256 of ``rawValue``: the clientDataHash the authenticator signed.
    public var hash: SHA256.Digest { SHA256.hash(data: self.rawValue) }

    /// Parses clientDataJSON.
    ///
    /// - Throws: ``WebAuthnError/Code/responseTooLarge`` over the limit,
    ///   ``WebAuthnError/Code/malformedClientData`` for anything else that is wrong.
    public init(bytes: [UInt8]) throws(WebAuthnError) {
        let value = try strictJSONObject(
            bytes,
            limit: WebAuthnLimits.maximumClientDataSize,
            what: "clientDataJSON",
            malformed: .malformedClientData
        )
        func requiredString(_ name: String) throws(WebAuthnError) -> String {
            guard let text = value.stringValue(name) else {
                throw WebAuthnError(code: .malformedClientData, reason: "clientDataJSON has no string member \"\(name)\"")
            }
            return text
        }
        self.rawValue = bytes
        self.type = try requiredString("type")
        self.challenge = try requiredString("challenge")
        self.origin = try requiredString("origin")
        switch value["crossOrigin"]?.kind {
        case nil: self.crossOrigin = false
        case .bool(let flag): self.crossOrigin = flag
        default: throw WebAuthnError(code: .malformedClientData, reason: "clientDataJSON's crossOrigin is not a boolean")
        }
        switch value["topOrigin"]?.kind {
        case nil: self.topOrigin = nil
        case .string: self.topOrigin = value.stringValue("topOrigin")
        default: throw WebAuthnError(code: .malformedClientData, reason: "clientDataJSON's topOrigin is not a string")
        }
    }
}
