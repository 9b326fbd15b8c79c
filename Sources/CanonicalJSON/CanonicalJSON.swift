//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import Foundation

/// RFC 8785 JSON Canonicalization Scheme.
///
/// ```swift
/// let canonical = try CanonicalJSON.canonicalize(Array(#"{"b": 1.50, "a": "x"}"#.utf8))
/// // {"a":"x","b":1.5}
/// ```
/// Input goes through ``StrictJSONParser``-level checks (duplicates, surrogates, UTF-8, numbers),
/// never through `JSONSerialization`, which keeps the last of two duplicate names and merges
/// names that Swift's `String ==` deems canonically equivalent.
public enum CanonicalJSON {
    /// Bounds on hostile input.
    public struct Limits: Sendable, Hashable {
        /// Largest input accepted, in bytes.
        public var maximumSize: Int
        /// Deepest nesting of arrays and objects accepted.
        public var maximumDepth: Int

        /// Refuse numbers that do not survive RFC 8785 exactly: whose decimal value differs from
        /// the double they parse to (`9007199254740993`, `0.30000000000000000001`, `1e-400`), or
        /// whose magnitude exceeds 2^53 (integers beyond it are not exact in every reader).
        /// RFC 8785 is right to round them, but a reader of the original text would then see a
        /// value other than the one that was canonicalized and signed. Off by default.
        public var exactNumbers: Bool

        public init(maximumSize: Int = 16 << 20, maximumDepth: Int = 64, exactNumbers: Bool = false) {
            self.maximumSize = maximumSize
            self.maximumDepth = maximumDepth
            self.exactNumbers = exactNumbers
        }

        /// 16 MiB, depth 64.
        public static let `default` = Limits()
    }

    /// Parses JSON strictly into a value whose members are in canonical order.
    ///
    /// - Throws: ``CanonicalJSONError`` for anything RFC 8785 cannot canonicalize.
    public static func parse(_ bytes: some Collection<UInt8>, limits: Limits = .default) throws(CanonicalJSONError)
        -> JSONValue
    {
        var parser = StrictJSONParser(input: Array(bytes), limits: limits)
        return try parser.parseDocument()
    }

    /// The canonical form of a JSON text.
    ///
    /// - Throws: ``CanonicalJSONError``.
    public static func canonicalize(_ bytes: some Collection<UInt8>, limits: Limits = .default)
        throws(CanonicalJSONError) -> [UInt8]
    {
        try self.parse(bytes, limits: limits).canonicalBytes
    }

    /// The canonical form of an `Encodable` value (a Codable form struct, say).
    ///
    /// The value is encoded with `encoder` (numbers become doubles, as JCS requires) and the result
    /// is canonicalized. Keys of a Swift `Dictionary` that are canonically equivalent are already
    /// one key there; model forms as structs to avoid that.
    ///
    /// - Throws: the encoder's error, or ``CanonicalJSONError``.
    public static func canonicalize(encoding value: some Encodable, encoder: JSONEncoder = JSONEncoder()) throws -> [UInt8] {
        try self.canonicalize(Array(try encoder.encode(value)))
    }
}
