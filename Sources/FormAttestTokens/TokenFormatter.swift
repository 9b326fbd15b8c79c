//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import AppAttest
public import CanonicalJSON
import FormAttestForm
public import Foundation

/// The formats a verified attestation can be turned into.
public enum TokenFormat: String, Sendable, Hashable, CaseIterable {
    /// The FIDO2-shaped wrapper (recommended).
    case fido2
    /// The server-signed JWS.
    case jws
    /// Test only: shaped like `packed`, marked invalid. Never produced unless asked for by name.
    case packedLikeUnsafe = "packed-like-unsafe"
    /// A FIDO2 `packed` attestation by the deployment's own attestation authority (only for a key
    /// whose App Attest attestation verified; docs/formats.md says what it proves).
    case packed

    /// The member name of this format in a `formats` object.
    public var memberName: String {
        switch self {
        case .fido2: return "fido2Wrapper"
        case .jws: return "serverAttestation"
        case .packedLikeUnsafe: return "packedLikeUnsafe"
        case .packed: return "packedAttestation"
        }
    }
}

/// Turns a verified attestation into the requested formats: one place for the CLI and the API.
public struct TokenFormatter: Sendable {
    public let signer: ServerAttestationSigner?
    /// The authority and relying party id of ``TokenFormat/packed``.
    public let packed: (authority: PackedAttestationAuthority, relyingPartyID: String)?

    /// - Parameters:
    ///   - signer: needed for ``TokenFormat/jws`` only.
    ///   - packed: needed for ``TokenFormat/packed`` only.
    public init(signer: ServerAttestationSigner?, packed: (authority: PackedAttestationAuthority, relyingPartyID: String)? = nil) {
        self.signer = signer
        self.packed = packed
    }

    /// What was verified, and about whom.
    public struct Input: Sendable {
        public var credential: AttestedCredential
        public var attestationObject: [UInt8]
        public var authenticatorData: [UInt8]
        /// What `attestationObject` / `authenticatorData` were made over (the FIDO2 wrapper and
        /// the packed-like format state it).
        public var clientDataHash: [UInt8]
        /// The accepted form's hash (the JWS's `form_hash`). The same as ``clientDataHash`` but
        /// for a pooled key, whose attestation was made over the pool challenge.
        public var formHash: [UInt8]
        public var counter: UInt32
        public var verifiedAt: Date
        public var username: String
        /// The passkey that signed the form too (the JWS's `amr` and `passkey` claims).
        public var passkey: PasskeyFactor?

        public init(
            credential: AttestedCredential,
            attestationObject: [UInt8],
            authenticatorData: [UInt8],
            clientDataHash: [UInt8],
            formHash: [UInt8]? = nil,
            counter: UInt32,
            verifiedAt: Date,
            username: String
        ) {
            self.credential = credential
            self.attestationObject = attestationObject
            self.authenticatorData = authenticatorData
            self.clientDataHash = clientDataHash
            self.formHash = formHash ?? clientDataHash
            self.counter = counter
            self.verifiedAt = verifiedAt
            self.username = username
        }

        /// The input for an attestation verified just now: the credential, the authenticator
        /// data and (unless given) the counter are the verified attestation's. The one
        /// derivation for `wrap` and the service's registration answers.
        ///
        /// - Parameters:
        ///   - attestation: the verifier's result.
        ///   - attestationObject: the bytes that were verified.
        ///   - clientDataHash: what the attestation was verified over.
        ///   - formHash: the accepted form's hash, when it differs (a pooled key).
        ///   - counter: the stored counter, when it is not the attestation's (a pooled key's
        ///     assertion).
        ///   - verifiedAt: the time of the verification.
        ///   - username: the user the key is registered to.
        public init(
            verified attestation: VerifiedAttestation,
            attestationObject: [UInt8],
            clientDataHash: [UInt8],
            formHash: [UInt8]? = nil,
            counter: UInt32? = nil,
            verifiedAt: Date,
            username: String
        ) {
            self.init(
                credential: AttestedCredential(attestation),
                attestationObject: attestationObject,
                authenticatorData: attestation.authenticatorData.rawValue,
                clientDataHash: clientDataHash,
                formHash: formHash,
                counter: counter ?? attestation.counter,
                verifiedAt: verifiedAt,
                username: username
            )
        }
    }

    public struct MissingSigner: Error, CustomStringConvertible {
        public var description: String { "the jws format needs a signing key" }
    }

    public struct MissingAuthority: Error, CustomStringConvertible {
        public var description: String { "the packed format needs an attestation authority and a relying party id" }
    }

    /// `{fido2Wrapper?, serverAttestation?, packedLikeUnsafe?}` for the requested formats.
    public func formats(_ requested: Set<TokenFormat>, for input: Input) async throws -> JSONValue {
        var members: [(name: String, value: JSONValue)] = []
        for format in TokenFormat.allCases where requested.contains(format) {
            switch format {
            case .fido2:
                members.append(
                    (
                        format.memberName,
                        FIDO2Wrapper.make(
                            credential: input.credential,
                            attestationObject: input.attestationObject,
                            clientDataHash: input.clientDataHash,
                            counter: input.counter,
                            verifiedAt: input.verifiedAt
                        )
                    ))
            case .jws:
                guard let signer = self.signer else { throw MissingSigner() }
                let token = try signer.sign(
                    username: input.username,
                    credential: input.credential,
                    formHash: input.formHash,
                    counter: input.counter,
                    now: input.verifiedAt,
                    passkey: input.passkey
                )
                members.append((format.memberName, .string(JSONString(token))))
            case .packed:
                // Only an attestation (a key registered now) is vouched for: `attestationObject`
                // is empty for an assertion.
                guard let packed = self.packed, !input.attestationObject.isEmpty else { throw MissingAuthority() }
                members.append(
                    (
                        format.memberName,
                        try PackedAttestation.make(
                            credential: input.credential,
                            relyingPartyID: packed.relyingPartyID,
                            clientDataHash: input.clientDataHash,
                            authority: packed.authority
                        )
                    ))
            case .packedLikeUnsafe:
                members.append(
                    (
                        format.memberName,
                        try PackedLikeAttestation.makeUnsafeTestOnly(authenticatorData: input.authenticatorData, clientDataHash: input.clientDataHash)
                    ))
            }
        }
        return .object(JSONObject(constantMembers: members))
    }
}

extension TokenFormatter {
    /// Verifies an attestation with `verifier`, then writes it in the `requested` formats: what
    /// fails verification is never formatted (the verifier's error is returned instead).
    ///
    /// - Parameters:
    ///   - requested: the formats to write.
    ///   - attestation: the attestation object.
    ///   - keyID: the key id the app reported.
    ///   - clientDataHash: what the attestation must have been made over.
    ///   - verifier: the verifier, with its policy.
    ///   - at: the time of the verification (the tokens' too).
    ///   - username: the tokens' subject; the key id in base64url when `nil`.
    /// - Returns: the formats' JSON object, or the verifier's rejection.
    /// - Throws: only what formatting throws (a missing signer or authority).
    public func verifyThenFormat(
        _ requested: Set<TokenFormat>,
        attestation: [UInt8],
        keyID: [UInt8],
        clientDataHash: [UInt8],
        verifier: AppAttestVerifier,
        at: Date,
        username: String?
    ) async throws -> Result<JSONValue, AppAttestError> {
        let verified: VerifiedAttestation
        do {
            verified = try await verifier.verifyAttestation(attestation, keyID: keyID, clientDataHash: clientDataHash, at: at)
        } catch {
            return .failure(error)
        }
        let input = Input(
            verified: verified,
            attestationObject: attestation,
            clientDataHash: clientDataHash,
            verifiedAt: at,
            username: username ?? Base64URL.encode(verified.keyID)
        )
        return .success(try await self.formats(requested, for: input))
    }
}
