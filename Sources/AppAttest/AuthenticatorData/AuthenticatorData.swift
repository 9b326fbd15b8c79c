//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// Authenticator data as App Attest writes it (WebAuthn §6.1 layout, Apple's rules).
///
/// ```
/// rpIdHash(32) | flags(1) | signCount(4, big-endian)
///   [attestation only] aaguid(16) | credentialIdLength(2) | credentialId | COSE_Key
///   [iOS 27] one CBOR map of extensions, present whatever the ED flag says
/// ```
/// Apple sets only the AT flag (0x40), in attestations and in assertions alike, and iOS 27 appends
/// its extension map without setting ED. The parser therefore accepts, after the fixed part,
/// either nothing or exactly one CBOR map, and rejects anything else.
public struct AuthenticatorData: Sendable, Hashable {
    /// Which shape to parse: an attestation carries attested credential data, an assertion does not.
    public enum Kind: Sendable, Hashable {
        case attestation
        case assertion
    }

    /// The flags byte.
    public struct Flags: OptionSet, Sendable, Hashable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }

        public static let userPresent = Flags(rawValue: 0x01)
        public static let userVerified = Flags(rawValue: 0x04)
        public static let backupEligible = Flags(rawValue: 0x08)
        public static let backupState = Flags(rawValue: 0x10)
        public static let attestedCredentialData = Flags(rawValue: 0x40)
        public static let extensionData = Flags(rawValue: 0x80)
    }

    /// Length of the fixed part: rpIdHash, flags and counter.
    public static let fixedLength = 37

    /// The exact bytes this value was parsed from (hashed into the nonce).
    public let rawValue: [UInt8]
    /// SHA-256 of the app id (`TEAMID.bundleID`).
    public let relyingPartyIDHash: [UInt8]
    /// The flags byte.
    public let flags: Flags
    /// The signature counter.
    public let signCount: UInt32
    /// The attested credential; present exactly when parsed as ``Kind/attestation``.
    public let attestedCredentialData: AttestedCredentialData?
    /// The iOS 27 extension map, when present.
    public let extensions: AuthenticatorExtensions?

    /// Parses authenticator data.
    ///
    /// - Parameters:
    ///   - bytes: the raw authenticator data.
    ///   - kind: ``Kind/attestation`` requires the AT flag and attested credential data;
    ///     ``Kind/assertion`` reads only the fixed part, whatever the AT flag says.
    /// - Throws: ``AppAttestError/Code/malformedAuthenticatorData`` with the offending offset.
    public init(bytes: some Collection<UInt8>, kind: Kind) throws(AppAttestError) {
        let raw = Array(bytes)
        var rest = raw[...]
        guard rest.count >= Self.fixedLength else {
            throw AppAttestError.malformedAuthenticatorData(
                "\(raw.count) byte(s); at least \(Self.fixedLength) are required"
            )
        }
        self.rawValue = raw
        self.relyingPartyIDHash = Array(rest.prefix(32))
        rest = rest.dropFirst(32)
        // Invariant: rest.count >= 5 here (checked against fixedLength above).
        guard let flagsByte = rest.popFirst() else {
            throw AppAttestError.malformedAuthenticatorData("missing flags byte")
        }
        self.flags = Flags(rawValue: flagsByte)
        self.signCount = UInt32(bigEndianBytes: rest.prefix(4))
        rest = rest.dropFirst(4)

        switch kind {
        case .attestation:
            guard self.flags.contains(.attestedCredentialData) else {
                throw AppAttestError.malformedAuthenticatorData("the AT flag is not set in attestation authData")
            }
            let offset = raw.count - rest.count
            let (credential, consumed) = try AttestedCredentialData.parse(rest, offset: offset)
            self.attestedCredentialData = credential
            rest = rest.dropFirst(consumed)
        case .assertion:
            self.attestedCredentialData = nil
        }

        if rest.isEmpty {
            self.extensions = nil
        } else {
            let offset = raw.count - rest.count
            self.extensions = try AuthenticatorExtensions(trailingBytes: rest, offset: offset)
        }
    }
}

extension UInt32 {
    /// Reads exactly four big-endian bytes. Callers have checked the count.
    init(bigEndianBytes bytes: some Collection<UInt8>) {
        precondition(bytes.count == 4, "caller checks the width")
        self = bytes.reduce(0) { ($0 << 8) | UInt32($1) }
    }

    /// Reads one to four little-endian bytes (iOS 27's validation category and CDHash type);
    /// `nil` for another count.
    package init?(littleEndianBytes bytes: some Collection<UInt8>) {
        guard (1...4).contains(bytes.count) else { return nil }
        // Invariant: at most four bytes, so the shifts stay below 32.
        self = bytes.enumerated().reduce(0) { $0 | UInt32($1.element) << (8 * UInt32($1.offset)) }
    }
}
