//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// The extension map that iOS 27 appends to authenticator data without setting the ED flag.
///
/// Apple's 2026 sample carries `{"apple_bundle_version_01": "1", "apple_validation_category_01":
/// h'01000000'}`. Both known entries are typed; entries with other text keys are kept, exposed in
/// ``additionalEntries`` and not interpreted. Keys that are not text are rejected.
public struct AuthenticatorExtensions: Sendable, Hashable {
    /// The key of the bundle version entry.
    public static let bundleVersionKey = "apple_bundle_version_01"
    /// The key of the validation category entry.
    public static let validationCategoryKey = "apple_validation_category_01"

    /// `apple_bundle_version_01`, when present.
    public let bundleVersion: String?
    /// `apple_validation_category_01` (the distribution category: App Store, TestFlight, ...), when present.
    public let validationCategory: [UInt8]?
    /// Every other entry, by key, in input order.
    public let additionalEntries: [String: CBORItem]
    /// Where the map stood in the authenticator data.
    public let range: Range<Int>

    /// Parses the bytes that follow the fixed part (and attested data) of authenticator data.
    ///
    /// - Throws: ``AppAttestError/Code/malformedAuthenticatorData`` unless `trailingBytes` is
    ///   exactly one CBOR map of the expected shape.
    init(trailingBytes: ArraySlice<UInt8>, offset: Int) throws {
        let item: CBORItem
        do {
            item = try CBORDecoder.decode(trailingBytes)
        } catch let error as AppAttestError {
            throw AppAttestError.malformedAuthenticatorData(
                "\(trailingBytes.count) byte(s) at offset \(offset) are not one CBOR extension map: \(error.reason)"
            )
        }
        guard let entries = item.mapEntries else {
            throw AppAttestError.malformedAuthenticatorData(
                "the \(trailingBytes.count) byte(s) at offset \(offset) are not a CBOR map"
            )
        }
        var bundleVersion: String?
        var validationCategory: [UInt8]?
        var additional: [String: CBORItem] = [:]
        for entry in entries {
            guard let key = entry.key.textString else {
                throw AppAttestError.malformedAuthenticatorData("an extension key is not a text string")
            }
            switch key {
            case Self.bundleVersionKey:
                guard let value = entry.value.textString else {
                    throw AppAttestError.malformedAuthenticatorData("\(key) is not a text string")
                }
                bundleVersion = value
            case Self.validationCategoryKey:
                guard let value = entry.value.byteString else {
                    throw AppAttestError.malformedAuthenticatorData("\(key) is not a byte string")
                }
                validationCategory = value
            default:
                additional[key] = entry.value
            }
        }
        self.bundleVersion = bundleVersion
        self.validationCategory = validationCategory
        self.additionalEntries = additional
        self.range = offset..<(offset + trailingBytes.count)
    }
}
