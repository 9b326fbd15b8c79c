//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// A JSON object read as strictly as ``CanonicalJSON/parse(_:limits:)`` reads it, but whose values
/// are not built: each member says where its value lies, and a reader takes only the values it
/// needs (a WebAuthn response's few strings), straight from the input's bytes.
///
/// Every nested value is checked when the object is read: the size and depth limits, duplicate
/// names at every level, UTF-8, escapes, surrogates, numbers; what ``CanonicalJSON/parse(_:limits:)``
/// refuses, this refuses with the same code. Only the values' trees are left unbuilt.
package struct JSONObjectMembers: Sendable {
    /// What a value is.
    package enum Kind: Sendable, Hashable {
        case null
        case bool(Bool)
        case number
        case string
        case array
        case object
    }

    /// Where a value lies in the input.
    package struct Value: Sendable {
        package let kind: Kind
        /// The value's bytes; for a string, its content between the quotes (still escaped).
        package let range: Range<Int>
        /// A string with escapes, whose content differs from its bytes.
        package let escaped: Bool
    }

    /// A member: its name (unescaped UTF-8) and where its value lies.
    package struct Member: Sendable {
        package let name: ArraySlice<UInt8>
        package let value: Value
    }

    /// The whole input (the values' ranges index into it).
    package let input: [UInt8]
    /// The members in their order in the input, names distinct.
    package let members: [Member]

    /// Reads `bytes` as one JSON object.
    ///
    /// - Throws: ``CanonicalJSONError`` for anything ``CanonicalJSON/parse(_:limits:)`` refuses,
    ///   and `json_syntax` for a JSON text that is not an object.
    package init(parsing bytes: some Collection<UInt8>, limits: CanonicalJSON.Limits) throws(CanonicalJSONError) {
        let input = Array(bytes)
        var parser = StrictJSONParser(input: input, limits: limits)
        self.members = try parser.scanDocumentMembers()
        self.input = input
    }

    private init(input: [UInt8], members: [Member]) {
        self.input = input
        self.members = members
    }

    /// The value of the member whose name has exactly these code units, or `nil`.
    package subscript(name: String) -> Value? {
        // Lengths first: names of another length (most of them) are never compared byte by byte.
        let wanted = name.utf8
        let count = wanted.count
        for member in self.members where member.name.count == count && member.name.elementsEqual(wanted) {
            return member.value
        }
        return nil
    }

    /// A string value's content (unescaped UTF-8, already checked to be well formed): the input's
    /// own bytes unless the string has escapes.
    ///
    /// - Precondition: `value` is a string of this object.
    package func string(_ value: Value) -> ArraySlice<UInt8> {
        precondition(value.kind == .string, "not a string value")
        guard value.escaped else { return self.input[value.range] }
        var parser = StrictJSONParser(input: self.input, limits: .default)
        // The string was checked when the object was read, so reading it again cannot fail.
        guard let unescaped = try? parser.unescapedString(at: value.range.lowerBound - 1) else {
            preconditionFailure("a string checked once failed its second reading")
        }
        return ArraySlice(unescaped)
    }

    /// The members of an object value.
    ///
    /// - Precondition: `value` is an object of this object.
    package func object(_ value: Value) -> JSONObjectMembers {
        precondition(value.kind == .object, "not an object value")
        var parser = StrictJSONParser(input: self.input, limits: .default)
        // The object was checked when its parent was read, so reading it again cannot fail.
        guard let members = try? parser.scanMembers(ofObjectAt: value.range.lowerBound) else {
            preconditionFailure("an object checked once failed its second reading")
        }
        return JSONObjectMembers(input: self.input, members: members)
    }

    /// The elements of an array value.
    ///
    /// - Precondition: `value` is an array of this object.
    package func elements(_ value: Value) -> [Value] {
        precondition(value.kind == .array, "not an array value")
        var parser = StrictJSONParser(input: self.input, limits: .default)
        // The array was checked when its parent was read, so reading it again cannot fail.
        guard let elements = try? parser.scanElements(ofArrayAt: value.range.lowerBound) else {
            preconditionFailure("an array checked once failed its second reading")
        }
        return elements
    }
}
