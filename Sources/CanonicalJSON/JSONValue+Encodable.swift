//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// A `JSONValue` inside an `Encodable` value (a typed response that carries a token or a signed
/// record already built as JSON). Serialize the whole with
/// ``CanonicalJSON/canonicalize(encoding:encoder:)``, which canonicalizes what the encoder wrote.
extension JSONValue: Encodable {
    public func encode(to encoder: any Encoder) throws {
        switch self {
        case .null:
            var container = encoder.singleValueContainer()
            try container.encodeNil()
        case .bool(let value):
            var container = encoder.singleValueContainer()
            try container.encode(value)
        case .number(let value):
            var container = encoder.singleValueContainer()
            try container.encode(value)
        case .string(let value):
            var container = encoder.singleValueContainer()
            try container.encode(value.string)
        case .array(let elements):
            var container = encoder.unkeyedContainer()
            for element in elements { try container.encode(element) }
        case .object(let object):
            var container = encoder.container(keyedBy: MemberName.self)
            for member in object.members { try container.encode(member.value, forKey: MemberName(member.name.string)) }
        }
    }

    private struct MemberName: CodingKey {
        let stringValue: String
        var intValue: Int? { nil }
        init(_ name: String) { self.stringValue = name }
        init?(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }
}
