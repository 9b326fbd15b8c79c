//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

package import AppAttest
import ArgumentParser
import CanonicalJSON
import FormAttestForm
import Foundation

/// The iOS 27 / macOS 27 signal policy's flags on `verify attestation` and `verify assertion`.
/// `serve` reads the same settings (flags, FORMATTEST_* variables, its configuration file:
/// ServeSettings) into a ``SignalPolicy`` directly. Every value is checked strictly, by
/// ``SignalPolicy``'s initializer for both: a bad one stops the command (exit 2) with a message
/// naming the option.
struct SignalPolicyOptions: ParsableArguments {
    @Option(
        name: .customLong("validation-category"),
        help:
            "Accepted iOS 27 validation categories: comma-separated names (\(ValidationCategory.named.map(\.name).joined(separator: ", "))) or numbers (repeatable; FORMATTEST_VALIDATION_CATEGORIES)."
    )
    var validationCategories: [String] = []

    @Option(
        name: .customLong("minimum-bundle-version"),
        help: "Refuse a bundle version below this dot-separated numeric version (FORMATTEST_MINIMUM_BUNDLE_VERSION)."
    )
    var minimumBundleVersion: String?

    @Option(
        name: .customLong("allowed-cdhash"),
        help: "An allowed CDHash, hex (repeatable; FORMATTEST_ALLOWED_CDHASHES, comma-separated)."
    )
    var allowedCDHashes: [String] = []

    @Option(
        name: .customLong("allowed-cdhashes-file"),
        help: "A JSON file of allowed CDHashes by bundle version: {\"1.2.3\": [\"hex\", ...]} (FORMATTEST_ALLOWED_CDHASHES_FILE)."
    )
    var allowedCDHashesFile: String?

    @Flag(name: .customLong("require-cdhash"), help: "Refuse what carries no CDHash (FORMATTEST_REQUIRE_CDHASH=true).")
    var requireCDHash = false

    @Flag(
        name: .customLong("require-extensions"),
        help: "Refuse what lacks the iOS 27 validation category or bundle version (FORMATTEST_REQUIRE_EXTENSIONS=true)."
    )
    var requireExtensions = false

    @Option(
        name: .customLong("macos-access-control"),
        help:
            "Require exactly this access-control extension (1.2.840.113635.100.8.6) value, base64url as verify --json prints it, or base64 (FORMATTEST_MACOS_ACCESS_CONTROL)."
    )
    var macOSAccessControl: String?

    /// The values, read and checked (the CDHash file too): ``SignalPolicy/init(validationCategories:minimumBundleVersion:allowedCDHashes:allowedCDHashesFile:requireCDHash:requireExtensions:macOSAccessControl:name:)``.
    func policy() throws -> SignalPolicy {
        try SignalPolicy(
            validationCategories: self.validationCategories, minimumBundleVersion: self.minimumBundleVersion,
            allowedCDHashes: self.allowedCDHashes, allowedCDHashesFile: self.allowedCDHashesFile, requireCDHash: self.requireCDHash,
            requireExtensions: self.requireExtensions, macOSAccessControl: self.macOSAccessControl
        )
    }

    /// Sets the signal part of `policy`, reading the CDHash file if one is named.
    func apply(to policy: inout AppAttestPolicy) throws {
        try self.policy().apply(to: &policy)
    }
}

/// The signal policy's values, read and checked: ``SignalPolicyOptions``' flags on `verify`,
/// `serve`'s settings of the same keys on `serve`. Its initializer holds the one check of each.
package struct SignalPolicy: Sendable {
    /// The accepted validation categories; nil: any.
    package let validationCategories: Set<ValidationCategory>?
    package let minimumBundleVersion: BundleVersion?
    package let allowedCDHashes: AppAttestPolicy.CDHashAllowList
    /// The file the allowed CDHashes by bundle version were read from (StrictModes judges it).
    package let allowedCDHashesFile: String?
    package let requireCDHash: Bool
    package let requireExtensions: Bool
    package let requiredAccessControl: [UInt8]?

    /// Reads every value strictly, in this order, and the CDHash file if one is named.
    ///
    /// - Parameter name: how a message names the setting of a key: its flag (``Setting/flag(_:)``),
    ///   or on `serve` its flag and its source (``ServeSettings/Resolved/name(_:)``).
    /// - Throws: `ValidationError` naming the first value that is not valid.
    init(
        validationCategories: [String], minimumBundleVersion: String?, allowedCDHashes: [String], allowedCDHashesFile: String?,
        requireCDHash: Bool, requireExtensions: Bool, macOSAccessControl: String?, name: (String) -> String = Setting.flag
    ) throws {
        self.validationCategories = try Self.categories(validationCategories, name: name("validation-category"))
        self.minimumBundleVersion = try Self.bundleVersion(minimumBundleVersion, name: name("minimum-bundle-version"))
        var allowList = AppAttestPolicy.CDHashAllowList(Set(try Self.cdHashes(allowedCDHashes, name: name("allowed-cdhash"))))
        if let path = allowedCDHashesFile {
            allowList.byBundleVersion = try Self.cdHashFile(path, name: name("allowed-cdhashes-file"))
        }
        self.allowedCDHashes = allowList
        self.allowedCDHashesFile = allowedCDHashesFile
        self.requireCDHash = requireCDHash
        self.requireExtensions = requireExtensions
        self.requiredAccessControl = try Self.accessControl(macOSAccessControl, name: name("macos-access-control"))
    }

    /// `serve`'s signal settings, through the same check (the table checked each value already;
    /// the CDHash file is read again here, and a file changed since is refused the same way).
    ///
    /// - Throws: ``UsageError`` naming the setting with its source.
    package init(_ settings: ServeSettings.Resolved) throws {
        self = try settings.reported {
            try SignalPolicy(
                validationCategories: settings.list("validation-category"), minimumBundleVersion: settings.textIfSet("minimum-bundle-version"),
                allowedCDHashes: settings.list("allowed-cdhash"), allowedCDHashesFile: settings.textIfSet("allowed-cdhashes-file"),
                requireCDHash: settings.toggle("require-cdhash"), requireExtensions: settings.toggle("require-extensions"),
                macOSAccessControl: settings.textIfSet("macos-access-control"), name: settings.name
            )
        }
    }

    /// Sets the signal part of `policy`.
    package func apply(to policy: inout AppAttestPolicy) {
        if let categories = self.validationCategories {
            policy.validationCategories = .only(categories)
        }
        policy.minimumBundleVersion = self.minimumBundleVersion
        policy.allowedCDHashes = self.allowedCDHashes
        policy.requireCDHash = self.requireCDHash
        policy.requireExtensions = self.requireExtensions
        policy.requiredAccessControl = self.requiredAccessControl
    }

    // MARK: - Strict readers

    /// Comma-separated names or numbers; `nil` when no list was given.
    static func categories(_ lists: [String], name: String) throws -> Set<ValidationCategory>? {
        guard !lists.isEmpty else { return nil }
        var categories: Set<ValidationCategory> = []
        for list in lists {
            for item in list.split(separator: ",", omittingEmptySubsequences: false) {
                guard let category = ValidationCategory(argument: String(item)) else {
                    let names = ValidationCategory.named.map(\.name).joined(separator: ", ")
                    throw ValidationError("\(name): \(String(item).debugDescription) is not a validation category (\(names), or a number).")
                }
                categories.insert(category)
            }
        }
        return categories
    }

    static func bundleVersion(_ text: String?, name: String) throws -> BundleVersion? {
        guard let text else { return nil }
        guard let version = BundleVersion(text) else {
            throw ValidationError("\(name) must be a dot-separated numeric version such as 1.2.3, not \(text.debugDescription).")
        }
        return version
    }

    /// CDHashes in hex: 32 bytes (SHA-256) or 20 (the truncated form codesign prints as CDHash).
    static func cdHashes(_ texts: [String], name: String) throws -> [[UInt8]] {
        try texts.map { text in
            guard let bytes = HexCoding.decode(text), bytes.count == 32 || bytes.count == 20 else {
                throw ValidationError("\(name): \(text.debugDescription) is not a CDHash (64 or 40 hex digits).")
            }
            return bytes
        }
    }

    static func accessControl(_ text: String?, name: String) throws -> [UInt8]? {
        guard let text else { return nil }
        guard let bytes = Base64URL.decode(text), !bytes.isEmpty else {
            throw ValidationError("\(name) must be base64 (the access-control extension's DER value).")
        }
        return bytes
    }

    /// `{"1.2.3": ["hex", ...], ...}`, read with the strict JSON parser: duplicate names and two
    /// names for one version (`1.2` and `1.2.0`) are refused, as is anything but that shape.
    static func cdHashFile(_ path: String, name option: String) throws -> [BundleVersion: Set<[UInt8]>] {
        let name = "\(option) \(path)"
        let value: JSONValue
        do {
            value = try CanonicalJSON.parse(try InputFile.readBytes(path))
        } catch let error as CanonicalJSONError {
            throw ValidationError("\(name): not JSON: \(error.reason)")
        } catch let error as UsageError {
            throw ValidationError("\(option): \(error.description)")
        }
        guard case .object(let object) = value else {
            throw ValidationError("\(name): expected an object {\"bundle version\": [\"CDHash hex\", ...]}.")
        }
        var byVersion: [BundleVersion: Set<[UInt8]>] = [:]
        for member in object.members {
            guard let version = BundleVersion(member.name.string) else {
                throw ValidationError("\(name): \(member.name.string.debugDescription) is not a dot-separated numeric version.")
            }
            guard byVersion[version] == nil else {
                throw ValidationError("\(name): bundle version \(member.name.string.debugDescription) is listed twice.")
            }
            guard case .array(let items) = member.value else {
                throw ValidationError("\(name): the value of \(member.name.string.debugDescription) is not an array of hex strings.")
            }
            let texts = try items.map { item in
                guard let text = item.stringValue else {
                    throw ValidationError("\(name): the value of \(member.name.string.debugDescription) is not an array of hex strings.")
                }
                return text
            }
            byVersion[version] = Set(try Self.cdHashes(texts, name: name))
        }
        return byVersion
    }
}
