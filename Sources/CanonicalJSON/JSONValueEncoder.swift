//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Foundation

/// Encodes an `Encodable` value straight into a ``JSONValue`` (then ``JSONValue/canonicalBytes``
/// gives its RFC 8785 bytes): no JSON text in between, and no number the JSON model cannot hold
/// exactly.
///
/// Numbers become doubles, as RFC 8785 requires; an integer beyond ±2^53 (which a double would
/// round) or a non-finite floating-point value is refused with `EncodingError.invalidValue`, and
/// so are two members with one name. A `JSONValue` inside the value is taken as it is. There are no
/// key strategies, and one date strategy: types that answer in JSON format their dates as strings
/// themselves; JWT claims (RFC 7519) take ``DateEncoding/numericDate``.
public struct JSONValueEncoder: Sendable {
    /// How a `Date` inside the value is written.
    public enum DateEncoding: Sendable {
        /// As `Date` encodes itself (a number of seconds since 2001-01-01): no strategy.
        case deferredToDate
        /// RFC 7519 NumericDate: whole seconds since 1970-01-01 UTC (a fraction is truncated), as
        /// JWT claims carry times.
        case numericDate
    }

    public var dateEncoding: DateEncoding

    public init(dateEncoding: DateEncoding = .deferredToDate) {
        self.dateEncoding = dateEncoding
    }

    public func encode(_ value: some Encodable) throws -> JSONValue {
        let slot = Slot()
        try Self.encode(value, into: slot, codingPath: [], dates: self.dateEncoding)
        return try slot.value(codingPath: [])
    }

    fileprivate static func encode(_ value: some Encodable, into slot: Slot, codingPath: [any CodingKey], dates: DateEncoding) throws {
        if let json = value as? JSONValue {
            slot.content = .value(json)
        } else if dates == .numericDate, let date = value as? Date {
            slot.content = .value(try Self.number(date.timeIntervalSince1970.rounded(.towardZero), codingPath: codingPath))
        } else {
            try value.encode(to: ValueEncoder(slot: slot, codingPath: codingPath, dates: dates))
        }
    }

    fileprivate static func number(_ value: some BinaryInteger, codingPath: [any CodingKey]) throws -> JSONValue {
        guard let double = Double(exactly: value), double.magnitude <= 9_007_199_254_740_992 else {
            throw EncodingError.invalidValue(
                value, .init(codingPath: codingPath, debugDescription: "\(value) is beyond ±2^53: a JSON number would round it"))
        }
        return .number(double)
    }

    fileprivate static func number(_ value: Double, codingPath: [any CodingKey]) throws -> JSONValue {
        guard value.isFinite else {
            throw EncodingError.invalidValue(value, .init(codingPath: codingPath, debugDescription: "\(value) is not a JSON number"))
        }
        return .number(value)
    }
}

/// Where one value is being written: empty, a finished value, or an object or array under way.
private final class Slot {
    enum Content {
        case empty
        case value(JSONValue)
        case object([(name: String, slot: Slot)])
        case array([Slot])
    }

    var content = Content.empty

    func value(codingPath: [any CodingKey]) throws -> JSONValue {
        switch self.content {
        case .empty:
            return .object(JSONObject(constantMembers: []))  // a type that encoded nothing: {}, as JSONEncoder writes it
        case .value(let value):
            return value
        case .array(let slots):
            return .array(try slots.map { try $0.value(codingPath: codingPath) })
        case .object(let members):
            do {
                return .object(try JSONObject(try members.map { (name: $0.name, value: try $0.slot.value(codingPath: codingPath)) }))
            } catch let error as CanonicalJSONError {
                throw EncodingError.invalidValue(members.map(\.name), .init(codingPath: codingPath, debugDescription: error.reason))
            }
        }
    }

    /// A new member slot of this object (made an object if it was empty).
    func member(_ name: String) -> Slot {
        let slot = Slot()
        guard case .object(var members) = self.content else {
            self.content = .object([(name, slot)])
            return slot
        }
        self.content = .empty  // the array's only reference is `members`: appended in place
        members.append((name, slot))
        self.content = .object(members)
        return slot
    }

    /// A new element slot of this array (made an array if it was empty).
    func element() -> Slot {
        let slot = Slot()
        guard case .array(var elements) = self.content else {
            self.content = .array([slot])
            return slot
        }
        self.content = .empty
        elements.append(slot)
        self.content = .array(elements)
        return slot
    }

    var count: Int {
        if case .array(let elements) = self.content { return elements.count }
        return 0
    }
}

private struct ValueEncoder: Encoder {
    let slot: Slot
    let codingPath: [any CodingKey]
    let dates: JSONValueEncoder.DateEncoding
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if case .object = self.slot.content {} else { self.slot.content = .object([]) }
        return KeyedEncodingContainer(KeyedContainer(slot: self.slot, codingPath: self.codingPath, dates: self.dates))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        if case .array = self.slot.content {} else { self.slot.content = .array([]) }
        return UnkeyedContainer(slot: self.slot, codingPath: self.codingPath, dates: self.dates)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        SingleValueContainer(slot: self.slot, codingPath: self.codingPath, dates: self.dates)
    }
}

private struct KeyedContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let slot: Slot
    let codingPath: [any CodingKey]
    let dates: JSONValueEncoder.DateEncoding

    mutating func encodeNil(forKey key: Key) throws { self.slot.member(key.stringValue).content = .value(.null) }

    mutating func encode(_ value: some Encodable, forKey key: Key) throws {
        try JSONValueEncoder.encode(value, into: self.slot.member(key.stringValue), codingPath: self.codingPath + [key], dates: self.dates)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        ValueEncoder(slot: self.slot.member(key.stringValue), codingPath: self.codingPath + [key], dates: self.dates).container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        ValueEncoder(slot: self.slot.member(key.stringValue), codingPath: self.codingPath + [key], dates: self.dates).unkeyedContainer()
    }

    mutating func superEncoder() -> any Encoder {
        ValueEncoder(slot: self.slot.member("super"), codingPath: self.codingPath, dates: self.dates)
    }

    mutating func superEncoder(forKey key: Key) -> any Encoder {
        ValueEncoder(slot: self.slot.member(key.stringValue), codingPath: self.codingPath + [key], dates: self.dates)
    }
}

private struct UnkeyedContainer: UnkeyedEncodingContainer {
    let slot: Slot
    let codingPath: [any CodingKey]
    let dates: JSONValueEncoder.DateEncoding
    var count: Int { self.slot.count }

    mutating func encodeNil() throws { self.slot.element().content = .value(.null) }

    mutating func encode(_ value: some Encodable) throws {
        try JSONValueEncoder.encode(value, into: self.slot.element(), codingPath: self.codingPath, dates: self.dates)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        ValueEncoder(slot: self.slot.element(), codingPath: self.codingPath, dates: self.dates).container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        ValueEncoder(slot: self.slot.element(), codingPath: self.codingPath, dates: self.dates).unkeyedContainer()
    }

    mutating func superEncoder() -> any Encoder {
        ValueEncoder(slot: self.slot.element(), codingPath: self.codingPath, dates: self.dates)
    }
}

private struct SingleValueContainer: SingleValueEncodingContainer {
    let slot: Slot
    let codingPath: [any CodingKey]
    let dates: JSONValueEncoder.DateEncoding

    private func set(_ value: JSONValue) { self.slot.content = .value(value) }

    mutating func encodeNil() throws { self.set(.null) }
    mutating func encode(_ value: Bool) throws { self.set(.bool(value)) }
    mutating func encode(_ value: String) throws { self.set(.string(JSONString(value))) }
    mutating func encode(_ value: Double) throws { self.set(try JSONValueEncoder.number(value, codingPath: self.codingPath)) }
    mutating func encode(_ value: Float) throws { self.set(try JSONValueEncoder.number(Double(value), codingPath: self.codingPath)) }
    mutating func encode(_ value: Int) throws { self.set(try JSONValueEncoder.number(value, codingPath: self.codingPath)) }
    mutating func encode(_ value: Int8) throws { self.set(try JSONValueEncoder.number(value, codingPath: self.codingPath)) }
    mutating func encode(_ value: Int16) throws { self.set(try JSONValueEncoder.number(value, codingPath: self.codingPath)) }
    mutating func encode(_ value: Int32) throws { self.set(try JSONValueEncoder.number(value, codingPath: self.codingPath)) }
    mutating func encode(_ value: Int64) throws { self.set(try JSONValueEncoder.number(value, codingPath: self.codingPath)) }
    mutating func encode(_ value: UInt) throws { self.set(try JSONValueEncoder.number(value, codingPath: self.codingPath)) }
    mutating func encode(_ value: UInt8) throws { self.set(try JSONValueEncoder.number(value, codingPath: self.codingPath)) }
    mutating func encode(_ value: UInt16) throws { self.set(try JSONValueEncoder.number(value, codingPath: self.codingPath)) }
    mutating func encode(_ value: UInt32) throws { self.set(try JSONValueEncoder.number(value, codingPath: self.codingPath)) }
    mutating func encode(_ value: UInt64) throws { self.set(try JSONValueEncoder.number(value, codingPath: self.codingPath)) }

    mutating func encode(_ value: some Encodable) throws {
        try JSONValueEncoder.encode(value, into: self.slot, codingPath: self.codingPath, dates: self.dates)
    }
}
