//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import AppAttest
import CBOR
public import Crypto
public import Foundation
import SwiftASN1
import X509

/// A software device that plays Apple's part: it makes keys, attestation objects and assertions
/// in the exact wire format of real ones (facts.md), signed by a ``SimulatedAttestationAuthority``.
///
/// What it sends beyond the iOS 14–26 format is its ``Profile``: the iOS 27 / macOS 27 extension
/// map (``SimulatedSignals``) on attestations and, or not, on assertions, the assertion flags, and
/// the access-control extension of macOS 27 leaves. Every field can also be changed one at a time
/// through ``AttestationOptions`` and ``AssertionOptions``, which is how the verifier's negative
/// tests are written.
public struct SimulatedDevice: Sendable {
    /// The CA that certifies this device's keys.
    public let authority: SimulatedAttestationAuthority
    /// `TEAMID.bundleID` of the app this device runs.
    public let appID: String
    /// The environment its attestations name.
    public let environment: AppAttestEnvironment
    /// The seed its keys derive from.
    public let seed: UInt64
    /// What the device sends beyond the pre-iOS 27 format.
    public var profile: Profile

    /// Which OS generation the device plays: what it adds to attestations and assertions.
    public struct Profile: Sendable, Hashable {
        /// The extension map's signals; `nil` for a device before iOS 27 (no map at all).
        public var signals: SimulatedSignals?
        /// Whether assertions carry the map too (live iOS 27 assertions were seen with and without).
        public var assertionsCarrySignals: Bool
        /// The assertion flags: 0x40 (AT set, as Apple writes them) or anything else to try.
        public var assertionFlags: UInt8
        /// The DER value of the leaf's access-control extension (1.2.840.113635.100.8.6), or `nil`.
        public var accessControl: [UInt8]?

        public init(
            signals: SimulatedSignals? = nil,
            assertionsCarrySignals: Bool = true,
            assertionFlags: UInt8 = 0x40,
            accessControl: [UInt8]? = nil
        ) {
            self.signals = signals
            self.assertionsCarrySignals = assertionsCarrySignals
            self.assertionFlags = assertionFlags
            self.accessControl = accessControl
        }

        /// iOS 14 to 26: no extension map, no access-control extension.
        public static let beforeIOS27 = Profile()

        /// iOS 27: the map on attestations and assertions.
        public static func iOS27(_ signals: SimulatedSignals = SimulatedSignals()) -> Profile {
            Profile(signals: signals)
        }

        /// macOS 27: the map, and the key's access control in the leaf (the shape of Apple's
        /// 2026 sample unless given).
        public static func macOS27(
            _ signals: SimulatedSignals = SimulatedSignals(validationCategory: .developerID),
            accessControl: [UInt8] = SimulatedDevice.sampleAccessControl
        ) -> Profile {
            Profile(signals: signals, accessControl: accessControl)
        }
    }

    /// The access-control extension value of Apple's 2026 sample leaf (real bytes):
    /// `SEQUENCE { [3] { OCTET STRING { SEQUENCE { "11", { {"okd", [1] TRUE}, {"oa", [1] TRUE},
    /// {"osgn", [1] TRUE}, {"odel", [1] TRUE}, {"ock", [1] TRUE} } } } } }`.
    public static let sampleAccessControl: [UInt8] = [
        0x30, 0x49, 0xA3, 0x47, 0x04, 0x45, 0x30, 0x43, 0x0C, 0x02, 0x31, 0x31, 0x30, 0x3D, 0x30, 0x0A,
        0x0C, 0x03, 0x6F, 0x6B, 0x64, 0xA1, 0x03, 0x01, 0x01, 0xFF, 0x30, 0x09, 0x0C, 0x02, 0x6F, 0x61,
        0xA1, 0x03, 0x01, 0x01, 0xFF, 0x30, 0x0B, 0x0C, 0x04, 0x6F, 0x73, 0x67, 0x6E, 0xA1, 0x03, 0x01,
        0x01, 0xFF, 0x30, 0x0B, 0x0C, 0x04, 0x6F, 0x64, 0x65, 0x6C, 0xA1, 0x03, 0x01, 0x01, 0xFF, 0x30,
        0x0A, 0x0C, 0x03, 0x6F, 0x63, 0x6B, 0xA1, 0x03, 0x01, 0x01, 0xFF,
    ]

    public init(
        authority: SimulatedAttestationAuthority,
        appID: String,
        environment: AppAttestEnvironment = .development,
        seed: UInt64 = 1,
        profile: Profile = .beforeIOS27
    ) {
        self.authority = authority
        self.appID = appID
        self.environment = environment
        self.seed = seed
        self.profile = profile
    }

    /// The key number `index` of this device (the same for the same seed and index).
    public func key(_ index: Int) -> SimulatedKey {
        SimulatedKey(privateKey: SeededKeys.p256(seed: self.seed, label: "device-key-\(index)"))
    }

    /// A fresh random key, as `DCAppAttestService.generateKey` makes.
    public func generateKey() -> SimulatedKey {
        SimulatedKey(privateKey: P256.Signing.PrivateKey())
    }

    // MARK: - Attestation

    /// Fields of an attestation, each defaulting to what a genuine device writes.
    public struct AttestationOptions: Sendable {
        /// `fmt`.
        public var format = AttestationObject.appleFormat
        /// The authData flags (Apple: AT only).
        public var flags: UInt8 = 0x40
        /// The counter (Apple: 0).
        public var counter: UInt32 = 0
        /// The aaguid; `nil` means the device environment's.
        public var aaguid: [UInt8]?
        /// The app id hashed into rpIdHash; `nil` means the device's.
        public var relyingPartyID: String?
        /// The credentialId; `nil` means the keyId.
        public var credentialID: [UInt8]?
        /// The COSE key's point in authData; `nil` means the attested key's.
        public var credentialPublicKey: P256.Signing.PublicKey?
        /// The public key in the certificate; `nil` means the attested key's.
        public var certifiedPublicKey: P256.Signing.PublicKey?
        /// Raw bytes appended after the COSE key (iOS 27 puts one CBOR map there); `nil` means the
        /// profile's map (or nothing).
        public var authenticatorDataSuffix: [UInt8]?
        /// The DER value of the leaf's access-control extension; `nil` means the profile's.
        public var accessControl: [UInt8]?
        /// The nonce put in the certificate; `nil` means SHA256(authData || clientDataHash).
        public var certifiedNonce: [UInt8]?
        /// The whole DER value of the nonce extension; `nil` means the genuine shape. Set to `[]`
        /// together with ``omitNonceExtension`` to leave it out.
        public var nonceExtensionValue: [UInt8]?
        /// Leave the nonce extension out of the certificate.
        public var omitNonceExtension = false
        /// The OS version in extension 1.2.840.113635.100.8.7.
        public var osVersion = "17.4"
        /// Validity of the credential certificate relative to the attestation time (Apple: 3 days
        /// from about a day before).
        public var validityStartOffset: TimeInterval = -86_400
        public var validityDuration: TimeInterval = 3 * 86_400
        /// Issue the credential certificate with this other CA's intermediate key, while x5c still
        /// carries this device's genuine intermediate (a forged leaf).
        public var forgedLeafIssuer: SimulatedAttestationAuthority?
        /// The receipt bytes; `nil` means a genuine receipt signed by the authority's
        /// ``SimulatedAttestationAuthority/receiptAuthority`` for this key and clientDataHash.
        public var receipt: [UInt8]?

        public init() {}
    }

    /// The iOS 27 extension map as Apple's 2026 sample carries it.
    public static func iOS27ExtensionMap(bundleVersion: String = "1", validationCategory: [UInt8] = [1, 0, 0, 0])
        -> [UInt8]
    {
        var signals = SimulatedSignals(bundleVersion: bundleVersion)
        signals.validationCategory = validationCategory
        return signals.extensionMap
    }

    /// Attests `key` over `clientDataHash`, as `DCAppAttestService.attestKey` does.
    ///
    /// - Parameters:
    ///   - key: the key to attest.
    ///   - clientDataHash: the opaque bytes the app passes (SHA-256 of the form in FormAttest).
    ///   - time: the issuance time of the credential certificate.
    ///   - options: deviations from a genuine attestation, for negative tests.
    /// - Returns: the CBOR attestation object.
    public func attest(
        _ key: SimulatedKey,
        clientDataHash: [UInt8],
        at time: Date,
        options: AttestationOptions = AttestationOptions()
    ) throws -> [UInt8] {
        let credentialKey = options.credentialPublicKey ?? key.publicKey
        let cose = try COSEKey(x963Representation: Array(credentialKey.x963Representation))
        let credentialID = options.credentialID ?? key.keyID
        var authData = self.fixedAuthenticatorData(
            relyingPartyID: options.relyingPartyID ?? self.appID,
            flags: options.flags,
            counter: options.counter
        )
        authData += options.aaguid ?? self.environment.aaguid
        authData += [UInt8(truncatingIfNeeded: credentialID.count >> 8), UInt8(truncatingIfNeeded: credentialID.count)]
        authData += credentialID
        authData += cose.cborEncoded
        authData += options.authenticatorDataSuffix ?? self.profile.signals?.extensionMap ?? []

        let nonce = options.certifiedNonce ?? Array(SHA256.hash(data: authData + clientDataHash))
        var extensions: [Certificate.Extension] = []
        if !options.omitNonceExtension {
            let value = try options.nonceExtensionValue ?? Self.explicitlyTaggedOctets(nonce, tagNumber: 1)
            extensions.append(.init(oid: .AppAttest.nonce, critical: false, value: value[...]))
        }
        extensions.append(
            .init(
                oid: .AppAttest.appProperties,
                critical: false,
                value: try Self.explicitlyTaggedOctets(Array(self.appID.utf8), tagNumber: 1204)[...]
            )
        )
        extensions.append(
            .init(
                oid: .AppAttest.osProperties,
                critical: false,
                value: try Self.explicitlyTaggedOctets(Array(options.osVersion.utf8), tagNumber: 1400)[...]
            )
        )
        if let accessControl = options.accessControl ?? self.profile.accessControl {
            extensions.append(.init(oid: .AppAttest.accessControl, critical: false, value: accessControl[...]))
        }
        let leaf = try (options.forgedLeafIssuer ?? self.authority).issueCredentialCertificate(
            for: options.certifiedPublicKey ?? key.publicKey,
            keyID: key.keyID,
            extensions: extensions,
            notValidBefore: time.addingTimeInterval(options.validityStartOffset),
            notValidAfter: time.addingTimeInterval(options.validityStartOffset + options.validityDuration)
        )

        let chain = [try Self.der(leaf), try Self.der(self.authority.intermediateCertificate)]
        let receipt =
            try options.receipt
            ?? self.authority.receiptAuthority.receipt(
                .init(
                    appID: self.appID,
                    attestedCertificate: chain[0],
                    clientHash: clientDataHash,
                    environment: self.environment,
                    creationTime: time
                )
            )
        var serializer = CBORSerializer(reservingCapacity: 2048)
        try serializer.appendMap([
            (.text("fmt"), { $0.appendTextString(options.format) }),
            (
                .text("attStmt"),
                { statement in
                    try statement.appendMap([
                        (
                            .text("x5c"),
                            { array in
                                array.appendArrayHeader(count: chain.count)
                                for der in chain { array.appendByteString(der) }
                            }
                        ),
                        (.text("receipt"), { $0.appendByteString(receipt) }),
                    ])
                }
            ),
            (.text("authData"), { $0.appendByteString(authData) }),
        ])
        return serializer.bytes
    }

    // MARK: - Assertion

    /// Fields of an assertion, each defaulting to what a genuine device writes.
    public struct AssertionOptions: Sendable {
        /// The authData flags; `nil` means the profile's (Apple sets AT even in assertions).
        public var flags: UInt8?
        /// The app id hashed into rpIdHash; `nil` means the device's.
        public var relyingPartyID: String?
        /// Raw bytes appended after the 37-byte authData (iOS 27 may put one CBOR map there);
        /// `nil` means the profile's map, when its assertions carry one.
        public var authenticatorDataSuffix: [UInt8]?
        /// Sign with this key instead of the attested one.
        public var signingKey: P256.Signing.PrivateKey?

        public init() {}
    }

    /// Signs `clientDataHash` with `key`, as `DCAppAttestService.generateAssertion` does.
    ///
    /// - Returns: the CBOR assertion `{signature, authenticatorData}`.
    public func assert(
        _ key: SimulatedKey,
        clientDataHash: [UInt8],
        counter: UInt32,
        options: AssertionOptions = AssertionOptions()
    ) throws -> [UInt8] {
        let profileSuffix = self.profile.assertionsCarrySignals ? self.profile.signals?.extensionMap : nil
        let authData =
            self.fixedAuthenticatorData(
                relyingPartyID: options.relyingPartyID ?? self.appID,
                flags: options.flags ?? self.profile.assertionFlags,
                counter: counter
            ) + (options.authenticatorDataSuffix ?? profileSuffix ?? [])
        let nonce = Array(SHA256.hash(data: authData + clientDataHash))
        // signature(for:) hashes its input with SHA-256: the device signs SHA256(nonce).
        let signature = try (options.signingKey ?? key.privateKey).signature(for: nonce)
        var serializer = CBORSerializer(reservingCapacity: 160)
        try serializer.appendMap([
            (.text("signature"), { $0.appendByteString(Array(signature.derRepresentation)) }),
            (.text("authenticatorData"), { $0.appendByteString(authData) }),
        ])
        return serializer.bytes
    }

    // MARK: - Helpers

    private func fixedAuthenticatorData(relyingPartyID: String, flags: UInt8, counter: UInt32) -> [UInt8] {
        var bytes = Array(SHA256.hash(data: Array(relyingPartyID.utf8)))
        bytes.append(flags)
        bytes += [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: counter >> $0) }
        return bytes
    }

    /// `SEQUENCE { [tagNumber] EXPLICIT OCTET STRING bytes }`, the shape of Apple's extensions.
    static func explicitlyTaggedOctets(_ bytes: [UInt8], tagNumber: UInt) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.appendConstructedNode(identifier: .sequence) { sequence in
            try sequence.appendConstructedNode(
                identifier: ASN1Identifier(tagWithNumber: tagNumber, tagClass: .contextSpecific)
            ) { tagged in
                try tagged.serialize(ASN1OctetString(contentBytes: bytes[...]))
            }
        }
        return serializer.serializedBytes
    }

    static func der(_ certificate: Certificate) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        return serializer.serializedBytes
    }
}
