//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CBOR

/// The extension map that iOS 27 (and macOS 27) append to authenticator data without setting the
/// ED flag, in attestations and in assertions: the signals a deployment can restrict.
///
/// Apple's 2026 sample carries `{"apple_bundle_version_01": "1", "apple_validation_category_01":
/// h'01000000'}`. The entries read here, each typed:
///
/// | signal | keys | wire type |
/// |---|---|---|
/// | ``validationCategory`` | `apple_validation_category_01`, or `validationCategory` (the spelling of Apple's assertion documentation) | byte string of exactly 4 bytes, little-endian `UInt32` |
/// | ``bundleVersion`` | `apple_bundle_version_01`, or `bundleVersion` | non-empty text |
/// | ``cdHash`` | `apple_cd_hash_hash_01` (apps with the `CDhash` App Attest opt-in) | byte string, 1 to 64 bytes (32: a SHA-256 CodeDirectory hash) |
/// | ``cdHashType`` | `apple_cd_hash_type_01` | byte string of 1 to 4 bytes, little-endian (one byte `h'02'` is what devices send), or an unsigned integer; 2 is SHA-256 |
///
/// A signal with another wire type, both spellings present with different values, or a CDHash
/// without its type (or the reverse) is malformed: the whole authenticator data is rejected with
/// ``AppAttestError/Code/malformedAuthenticatorData``, whatever the policy. Entries with other
/// text keys are kept, unexamined, as their encoded bytes in ``additionalEntries``. Keys that are not text are rejected.
public struct AuthenticatorExtensions: Sendable, Hashable {
    /// The key of the bundle version entry.
    public static let bundleVersionKey = "apple_bundle_version_01"
    /// The key of the validation category entry.
    public static let validationCategoryKey = "apple_validation_category_01"
    /// The short spelling of the bundle version key, as Apple's documentation writes it for assertions.
    public static let bundleVersionShortKey = "bundleVersion"
    /// The short spelling of the validation category key, as Apple's documentation writes it for assertions.
    public static let validationCategoryShortKey = "validationCategory"
    /// The key of the CodeDirectory hash of the running binary.
    public static let cdHashKey = "apple_cd_hash_hash_01"
    /// The key of the CodeDirectory hash's type.
    public static let cdHashTypeKey = "apple_cd_hash_type_01"

    /// The CodeDirectory hash type of a SHA-256 CDHash.
    public static let cdHashTypeSHA256: UInt32 = 2

    /// The bundle version (`CFBundleVersion` of the running app), when present.
    public let bundleVersion: String?
    /// The validation category (App Store, TestFlight, ...), when present.
    public let validationCategory: ValidationCategory?
    /// The CodeDirectory hash of the running binary, when present.
    public let cdHash: [UInt8]?
    /// The type of ``cdHash`` (2 is SHA-256), present exactly when ``cdHash`` is.
    public let cdHashType: UInt32?
    /// Every other entry, by key: the value's encoded CBOR bytes, exactly as they stood in the
    /// authenticator data.
    public let additionalEntries: [String: [UInt8]]
    /// Where the map stood in the authenticator data.
    public let range: Range<Int>

    /// ``bundleVersion`` as a comparable version, when it is dot-separated digits.
    public var parsedBundleVersion: BundleVersion? { self.bundleVersion.flatMap(BundleVersion.init) }

    /// Whether the map carries any signal this type reads (a map of unknown entries carries none).
    public var hasSignals: Bool {
        self.bundleVersion != nil || self.validationCategory != nil || self.cdHash != nil
    }

    /// Parses the bytes that follow the fixed part (and attested data) of authenticator data.
    ///
    /// - Throws: ``AppAttestError/Code/malformedAuthenticatorData`` unless `trailingBytes` is
    ///   exactly one CBOR map of the expected shape.
    init(trailingBytes: ArraySlice<UInt8>, offset: Int) throws(AppAttestError) {
        let item: CBORItem
        do {
            item = try CBORDecoder.decode(trailingBytes)
        } catch {
            throw AppAttestError.malformedAuthenticatorData(
                "\(trailingBytes.count) byte(s) at offset \(offset) are not one CBOR extension map: \(error.reason)"
            )
        }
        guard let entries = item.mapEntries else {
            throw AppAttestError.malformedAuthenticatorData(
                "the \(trailingBytes.count) byte(s) at offset \(offset) are not a CBOR map"
            )
        }
        var bundleVersions: [(key: String, value: String)] = []
        var categories: [(key: String, value: ValidationCategory)] = []
        var cdHash: [UInt8]?
        var cdHashType: UInt32?
        var additional: [String: [UInt8]] = [:]
        for entry in entries {
            guard let key = entry.key.textString else {
                throw AppAttestError.malformedAuthenticatorData("an extension key is not a text string")
            }
            switch key {
            case Self.bundleVersionKey, Self.bundleVersionShortKey:
                guard let value = entry.value.textString, !value.isEmpty else {
                    throw AppAttestError.malformedAuthenticatorData("\(key) is not a non-empty text string")
                }
                bundleVersions.append((key, value))
            case Self.validationCategoryKey, Self.validationCategoryShortKey:
                guard let bytes = entry.value.byteString else {
                    throw AppAttestError.malformedAuthenticatorData("\(key) is not a byte string")
                }
                guard let category = ValidationCategory(littleEndianBytes: bytes) else {
                    throw AppAttestError.malformedAuthenticatorData(
                        "\(key) is \(bytes.count) byte(s); a validation category is exactly 4 (little-endian UInt32)"
                    )
                }
                categories.append((key, category))
            case Self.cdHashKey:
                guard let bytes = entry.value.byteString, (1...64).contains(bytes.count) else {
                    throw AppAttestError.malformedAuthenticatorData("\(key) is not a byte string of 1 to 64 bytes")
                }
                cdHash = bytes
            case Self.cdHashTypeKey:
                guard let type = Self.cdHashType(entry.value) else {
                    throw AppAttestError.malformedAuthenticatorData(
                        "\(key) is neither 1 to 4 little-endian bytes nor an unsigned integer below 2^32"
                    )
                }
                cdHashType = type
            default:
                additional[key] = Array(trailingBytes.dropFirst(entry.value.range.lowerBound).prefix(entry.value.range.count))
            }
        }
        self.bundleVersion = try Self.agreeing(bundleVersions)
        self.validationCategory = try Self.agreeing(categories)
        guard (cdHash == nil) == (cdHashType == nil) else {
            throw AppAttestError.malformedAuthenticatorData(
                "\(cdHash == nil ? Self.cdHashTypeKey : Self.cdHashKey) is present without \(cdHash == nil ? Self.cdHashKey : Self.cdHashTypeKey)"
            )
        }
        self.cdHash = cdHash
        self.cdHashType = cdHashType
        self.additionalEntries = additional
        self.range = offset..<(offset + trailingBytes.count)
    }

    /// The one value of a signal written under one or both spellings; both with different values
    /// cannot be read (which one would the app have meant?), so they are malformed.
    private static func agreeing<Value: Equatable>(_ values: [(key: String, value: Value)]) throws(AppAttestError) -> Value? {
        guard let first = values.first else { return nil }
        for other in values.dropFirst() where other.value != first.value {
            throw AppAttestError.malformedAuthenticatorData("\(first.key) and \(other.key) disagree")
        }
        return first.value
    }

    private static func cdHashType(_ item: CBORItem) -> UInt32? {
        switch item.value {
        case .byteString(let bytes):
            return UInt32(littleEndianBytes: bytes)
        case .unsigned(let value):
            return UInt32(exactly: value)
        default:
            return nil
        }
    }
}
