//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import X509

/// What a relying party accepts.
public struct WebAuthnPolicy: Sendable {
    /// The relying party id (a registrable domain such as `example.com`); rpIdHash must be its SHA-256.
    public var relyingPartyID: String
    /// The origins clientDataJSON may name, compared exactly (scheme, host and port:
    /// `https://example.com`, or `http://localhost:5000` in development).
    public var allowedOrigins: Set<String>
    /// Require the UV flag (a biometric or a PIN), in registrations and assertions.
    public var requireUserVerification: Bool
    /// Accept `crossOrigin: true` (a ceremony in a cross-origin iframe). Off by default.
    public var allowCrossOrigin: Bool
    /// The top-level origins accepted in `topOrigin`; empty refuses any `topOrigin`.
    public var allowedTopOrigins: Set<String>
    /// The algorithms accepted for a credential's own key. RS1 is never in the default.
    public var credentialAlgorithms: Set<COSEAlgorithm>
    /// Trust anchors for attestation certificates (vendor roots such as Apple's WebAuthn root or
    /// Yubico's). With none, statements are still verified but the answer says not anchored.
    public var trustAnchors: [Certificate]

    /// Creates a policy.
    ///
    /// - Parameters:
    ///   - relyingPartyID: the RP id.
    ///   - allowedOrigins: the accepted origins (at least one).
    ///   - requireUserVerification: whether UV is required.
    ///   - allowCrossOrigin: whether `crossOrigin: true` is accepted.
    ///   - allowedTopOrigins: the `topOrigin`s accepted; empty refuses any.
    ///   - credentialAlgorithms: the algorithms accepted for a credential's key (RS1 only if listed).
    ///   - trustAnchors: roots for attestation certificates; none: statements are verified, not anchored.
    public init(
        relyingPartyID: String,
        allowedOrigins: Set<String>,
        requireUserVerification: Bool = false,
        allowCrossOrigin: Bool = false,
        allowedTopOrigins: Set<String> = [],
        credentialAlgorithms: Set<COSEAlgorithm> = COSEAlgorithm.defaultCredentialAlgorithms,
        trustAnchors: [Certificate] = []
    ) {
        self.relyingPartyID = relyingPartyID
        self.allowedOrigins = allowedOrigins
        self.requireUserVerification = requireUserVerification
        self.allowCrossOrigin = allowCrossOrigin
        self.allowedTopOrigins = allowedTopOrigins
        self.credentialAlgorithms = credentialAlgorithms
        self.trustAnchors = trustAnchors
    }
}
