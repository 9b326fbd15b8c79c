//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// The one error type of the `CanonicalJSON` module: the input is not I-JSON that RFC 8785 can
/// canonicalize. ``reason`` says what and ``offset`` where (a byte offset in the input).
public struct CanonicalJSONError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What was wrong.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Backing: String, Hashable, Sendable {
            case syntax = "json_syntax"
            case duplicateName = "duplicate_name"
            case loneSurrogate = "lone_surrogate"
            case invalidUTF8 = "invalid_utf8"
            case numberOutOfRange = "number_out_of_range"
            case inexactNumber = "inexact_number"
            case tooDeep = "too_deep"
            case tooLarge = "too_large"
        }

        fileprivate let backing: Backing
        fileprivate init(_ backing: Backing) { self.backing = backing }

        /// The stable `snake_case` identifier.
        public var identifier: String { self.backing.rawValue }
        public var description: String { self.backing.rawValue }

        /// Not JSON (RFC 8259 grammar), including `NaN` and `Infinity` literals.
        public static let syntax = Code(.syntax)
        /// Two members of one object have the same name after unescaping (I-JSON, RFC 8785 §3.1).
        public static let duplicateName = Code(.duplicateName)
        /// A `\u` escape leaves a surrogate unpaired (RFC 8785 §3.2.2.2).
        public static let loneSurrogate = Code(.loneSurrogate)
        /// The input is not well-formed UTF-8 (overlong forms and encoded surrogates included).
        public static let invalidUTF8 = Code(.invalidUTF8)
        /// A number does not fit an IEEE 754 double (it would be ±Infinity).
        public static let numberOutOfRange = Code(.numberOutOfRange)
        /// With ``CanonicalJSON/Limits/exactNumbers``: a number whose value its canonical form
        /// would change (more digits than a double holds, an underflow), or beyond ±2^53.
        public static let inexactNumber = Code(.inexactNumber)
        /// Arrays and objects nest deeper than the limit.
        public static let tooDeep = Code(.tooDeep)
        /// The input is larger than the limit.
        public static let tooLarge = Code(.tooLarge)
    }

    public let code: Code
    public let reason: String
    /// The byte offset in the input where the problem was found.
    public let offset: Int

    public init(code: Code, reason: String, offset: Int) {
        self.code = code
        self.reason = reason
        self.offset = offset
    }

    public var description: String { "\(self.code.identifier) at byte \(self.offset): \(self.reason)" }

    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.code == rhs.code }
    public func hash(into hasher: inout Hasher) { hasher.combine(self.code) }
}
