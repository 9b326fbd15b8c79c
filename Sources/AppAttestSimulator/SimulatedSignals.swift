//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import AppAttest
import CBOR

/// The extension map an iOS 27 / macOS 27 device appends to its authenticator data, entry by
/// entry, as raw values so that malformed ones can be made too.
///
/// ``extensionMap`` writes it: the entries present, under the chosen ``Spelling``, plus
/// ``extraEntries``, in deterministic key order (RFC 8949 §4.2.1), as Apple's sample has them.
public struct SimulatedSignals: Sendable, Hashable {
    /// Which keys carry the category and the bundle version.
    public enum Spelling: String, Sendable, Hashable, CaseIterable {
        /// `apple_bundle_version_01`, `apple_validation_category_01`: what devices send.
        case apple
        /// `bundleVersion`, `validationCategory`: how Apple's assertion documentation spells them.
        case documentation
        /// Both spellings, each with the same value.
        case both
    }

    /// The category's wire bytes (4, little-endian, for a genuine one), or `nil` to leave it out.
    public var validationCategory: [UInt8]?
    /// The bundle version, or `nil` to leave it out.
    public var bundleVersion: String?
    /// The CDHash (32 bytes for SHA-256), or `nil` to leave it out.
    public var cdHash: [UInt8]?
    /// The CDHash type's wire bytes (`[2]`: SHA-256, as devices send it); written only with ``cdHash``
    /// unless set alone on purpose.
    public var cdHashType: [UInt8]?
    /// The keys of the category and the bundle version.
    public var spelling: Spelling
    /// More entries: unknown keys, or a second, disagreeing spelling. Their keys must differ from
    /// the ones written for the fields above (a repeated key leaves the map empty).
    public var extraEntries: [(key: String, value: SimulatedValue)]

    /// A raw CBOR value for ``extraEntries``.
    public enum SimulatedValue: Sendable, Hashable {
        case text(String)
        case bytes([UInt8])
        case integer(Int64)
    }

    /// Signals as a device sends them.
    ///
    /// - Parameters:
    ///   - validationCategory: the category (written as four little-endian bytes), or `nil`.
    ///   - bundleVersion: the bundle version, or `nil`.
    ///   - cdHash: a CDHash, written with type 2 (SHA-256), or `nil`.
    ///   - spelling: the keys of the category and the bundle version.
    public init(
        validationCategory: ValidationCategory? = .appStore,
        bundleVersion: String? = "1",
        cdHash: [UInt8]? = nil,
        spelling: Spelling = .apple
    ) {
        self.validationCategory = validationCategory?.littleEndianBytes
        self.bundleVersion = bundleVersion
        self.cdHash = cdHash
        self.cdHashType = cdHash == nil ? nil : [UInt8(AuthenticatorExtensions.cdHashTypeSHA256)]
        self.spelling = spelling
        self.extraEntries = []
    }

    /// What Apple's 2026 sample carries: category 1 (`h'01000000'`), bundle version `"1"`.
    public static let apple2026Sample = SimulatedSignals(validationCategory: .osExecutable, bundleVersion: "1")

    /// The CBOR map, as the device appends it.
    public var extensionMap: [UInt8] {
        var entries: [(String, SimulatedValue)] = []
        let (versionKeys, categoryKeys): ([String], [String])
        switch self.spelling {
        case .apple:
            (versionKeys, categoryKeys) = ([AuthenticatorExtensions.bundleVersionKey], [AuthenticatorExtensions.validationCategoryKey])
        case .documentation:
            (versionKeys, categoryKeys) = ([AuthenticatorExtensions.bundleVersionShortKey], [AuthenticatorExtensions.validationCategoryShortKey])
        case .both:
            (versionKeys, categoryKeys) = (
                [AuthenticatorExtensions.bundleVersionKey, AuthenticatorExtensions.bundleVersionShortKey],
                [AuthenticatorExtensions.validationCategoryKey, AuthenticatorExtensions.validationCategoryShortKey]
            )
        }
        if let version = self.bundleVersion { entries += versionKeys.map { ($0, .text(version)) } }
        if let category = self.validationCategory { entries += categoryKeys.map { ($0, .bytes(category)) } }
        if let hash = self.cdHash { entries.append((AuthenticatorExtensions.cdHashKey, .bytes(hash))) }
        if let type = self.cdHashType { entries.append((AuthenticatorExtensions.cdHashTypeKey, .bytes(type))) }
        entries += self.extraEntries.map { ($0.key, $0.value) }

        var serializer = CBORSerializer()
        // A duplicate key is possible only through extraEntries (see there): the serializer
        // refuses it and the map stays empty.
        try? serializer.appendMap(
            entries.map { key, value in
                (
                    CBORSerializer.MapKey.text(key),
                    { (inner: inout CBORSerializer) in
                        switch value {
                        case .text(let text): inner.appendTextString(text)
                        case .bytes(let bytes): inner.appendByteString(bytes)
                        case .integer(let number): inner.appendInteger(number)
                        }
                    }
                )
            }
        )
        return serializer.bytes
    }

    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.validationCategory == rhs.validationCategory && lhs.bundleVersion == rhs.bundleVersion && lhs.cdHash == rhs.cdHash
            && lhs.cdHashType == rhs.cdHashType && lhs.spelling == rhs.spelling
            && lhs.extraEntries.map(\.key) == rhs.extraEntries.map(\.key) && lhs.extraEntries.map(\.value) == rhs.extraEntries.map(\.value)
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(self.validationCategory)
        hasher.combine(self.bundleVersion)
        hasher.combine(self.cdHash)
        hasher.combine(self.cdHashType)
        hasher.combine(self.spelling)
        hasher.combine(self.extraEntries.map(\.key))
    }
}
