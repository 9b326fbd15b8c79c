//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// A JSON value as RFC 8785 sees it: numbers are IEEE 754 doubles, strings are sequences of
/// Unicode scalars (never normalized), and object members are unique and kept in canonical order.
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case number(Double)
    case string(JSONString)
    case array([JSONValue])
    case object(JSONObject)

    /// The canonical (RFC 8785) UTF-8 serialization.
    public var canonicalBytes: [UInt8] {
        var writer = CanonicalWriter()
        writer.write(self)
        return writer.bytes
    }

    /// The member `name` of an object value, or `nil`.
    public subscript(name: String) -> JSONValue? {
        guard case .object(let object) = self else { return nil }
        return object[name]
    }

    /// The string of a string value, or `nil`.
    public var stringValue: String? {
        guard case .string(let string) = self else { return nil }
        return string.string
    }
}

/// A JSON string kept as its exact UTF-8 bytes.
///
/// Equality, hashing and ordering are by code units, never by Swift's `String` canonical
/// equivalence (under which `"é"` and `"e\u{301}"` would be one key).
public struct JSONString: Sendable, Hashable, CustomStringConvertible {
    /// The UTF-8 bytes (valid UTF-8, no unpaired surrogates).
    public let utf8: [UInt8]

    /// Wraps bytes already checked to be valid UTF-8.
    init(validatedUTF8 utf8: [UInt8]) {
        self.utf8 = utf8
    }

    /// Creates a JSON string from a Swift string (whose UTF-8 is always valid).
    public init(_ string: String) {
        self.utf8 = Array(string.utf8)
    }

    /// The string as a Swift `String`. Compare `JSONString`s, not these, when exactness matters.
    public var string: String { String(decoding: self.utf8, as: UTF8.self) }

    public var description: String { self.string }

    /// RFC 8785 §3.2.3 order: by UTF-16 code units.
    ///
    /// UTF-8 byte order is code point order, which agrees with UTF-16 code unit order except when a
    /// supplementary character (4-byte UTF-8, lead 0xF0-0xF4; UTF-16 lead surrogate 0xD800-0xDBFF)
    /// meets one in U+E000-U+FFFF (3-byte UTF-8, lead 0xEE or 0xEF): UTF-16 puts the supplementary
    /// one first. At the first differing byte both strings are at the same position within a
    /// character (their prefixes are equal), so the bytes there decide, with that one exception.
    public static func precedesInUTF16Order(_ lhs: [UInt8], _ rhs: [UInt8]) -> Bool {
        let count = min(lhs.count, rhs.count)
        var index = 0
        while index < count {
            let left = lhs[index]
            let right = rhs[index]
            if left != right {
                if left >= 0xF0, right == 0xEE || right == 0xEF { return true }
                if right >= 0xF0, left == 0xEE || left == 0xEF { return false }
                return left < right
            }
            index += 1
        }
        return lhs.count < rhs.count
    }
}

/// A JSON object: members with unique names, in RFC 8785 order (UTF-16 code units of the names).
public struct JSONObject: Sendable, Hashable {
    /// The members, sorted.
    public let members: [(name: JSONString, value: JSONValue)]

    /// Sorts `members` and rejects duplicate names.
    ///
    /// - Returns: `nil` with the duplicated name when two members share a name.
    static func sorted(_ members: [(name: JSONString, value: JSONValue)]) -> Result<JSONObject, DuplicateName> {
        let sorted = members.sorted { JSONString.precedesInUTF16Order($0.name.utf8, $1.name.utf8) }
        for (previous, next) in zip(sorted, sorted.dropFirst()) where previous.name.utf8 == next.name.utf8 {
            return .failure(DuplicateName(name: previous.name))
        }
        return .success(JSONObject(members: sorted))
    }

    struct DuplicateName: Error {
        let name: JSONString
    }

    private init(members: [(name: JSONString, value: JSONValue)]) {
        self.members = members
    }

    /// Builds an object from unique names; throws ``CanonicalJSONError/Code/duplicateName`` otherwise.
    public init(_ members: [(name: String, value: JSONValue)]) throws {
        switch Self.sorted(members.map { (JSONString($0.name), $0.value) }) {
        case .success(let object): self = object
        case .failure(let duplicate):
            throw CanonicalJSONError(code: .duplicateName, reason: "duplicate name \"\(duplicate.name)\"", offset: 0)
        }
    }

    /// Builds an object whose member names are distinct constants written in the code (a token's
    /// claims, a wrapper's fields).
    ///
    /// - Precondition: the names are distinct; a duplicate is a programming error and traps. Use
    ///   ``init(_:)`` for names that come from input.
    public init(constantMembers members: [(name: String, value: JSONValue)]) {
        guard case .success(let object) = Self.sorted(members.map { (JSONString($0.name), $0.value) }) else {
            preconditionFailure("duplicate constant member name")
        }
        self = object
    }

    /// The value of the member whose name has exactly these code units, or `nil`.
    public subscript(name: String) -> JSONValue? {
        let wanted = Array(name.utf8)
        return self.members.first(where: { $0.name.utf8 == wanted })?.value
    }

    public static func == (lhs: JSONObject, rhs: JSONObject) -> Bool {
        lhs.members.count == rhs.members.count
            && zip(lhs.members, rhs.members).allSatisfy { $0.name == $1.name && $0.value == $1.value }
    }

    public func hash(into hasher: inout Hasher) {
        for member in self.members {
            hasher.combine(member.name)
            hasher.combine(member.value)
        }
    }
}
