//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// A strict RFC 8259 / I-JSON parser that keeps what RFC 8785 needs and refuses what it forbids.
///
/// Unlike `JSONSerialization` it never merges members: names are compared by their exact code
/// units after unescaping, and a duplicate is an error. It also rejects ill-formed UTF-8 (overlong
/// forms, encoded surrogates, code points past U+10FFFF), `\u` escapes that leave a surrogate
/// unpaired, raw control characters in strings, a byte order mark, `NaN`/`Infinity` and numbers
/// that overflow a double. Numbers that underflow become 0, as in every IEEE 754 parser.
struct StrictJSONParser {
    private let input: [UInt8]
    private let limits: CanonicalJSON.Limits
    private var position = 0

    init(input: [UInt8], limits: CanonicalJSON.Limits) {
        self.input = input
        self.limits = limits
    }

    /// Parses the whole input as one JSON text.
    mutating func parseDocument() throws(CanonicalJSONError) -> JSONValue {
        guard self.input.count <= self.limits.maximumSize else {
            throw CanonicalJSONError(
                code: .tooLarge,
                reason: "\(self.input.count) bytes; the limit is \(self.limits.maximumSize)",
                offset: 0
            )
        }
        self.skipWhitespace()
        let value = try self.parseValue(depth: 0)
        self.skipWhitespace()
        guard self.position == self.input.count else {
            throw self.error(.syntax, "unexpected data after the JSON value")
        }
        return value
    }

    private func error(_ code: CanonicalJSONError.Code, _ reason: String, at offset: Int? = nil) -> CanonicalJSONError {
        CanonicalJSONError(code: code, reason: reason, offset: offset ?? self.position)
    }

    private var current: UInt8? {
        self.position < self.input.count ? self.input[self.position] : nil
    }

    private mutating func skipWhitespace() {
        while let byte = self.current, byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 {
            self.position += 1
        }
    }

    private mutating func parseValue(depth: Int) throws(CanonicalJSONError) -> JSONValue {
        guard let byte = self.current else {
            throw self.error(.syntax, "unexpected end of input, a value was expected")
        }
        switch byte {
        case UInt8(ascii: "{"): return try self.parseObject(depth: depth + 1)
        case UInt8(ascii: "["): return try self.parseArray(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try self.parseString())
        case UInt8(ascii: "t"): try self.expectLiteral("true"); return .bool(true)
        case UInt8(ascii: "f"): try self.expectLiteral("false"); return .bool(false)
        case UInt8(ascii: "n"): try self.expectLiteral("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try self.parseNumber())
        default:
            throw self.error(.syntax, "unexpected byte 0x\(String(byte, radix: 16)), a value was expected")
        }
    }

    private mutating func expectLiteral(_ literal: StaticString) throws(CanonicalJSONError) {
        let start = self.position
        var index = 0
        while index < literal.utf8CodeUnitCount {
            // StaticString's storage is a compile-time constant of known length.
            let expected = unsafe literal.utf8Start[index]
            guard self.current == expected else {
                throw self.error(.syntax, "invalid literal", at: start)
            }
            self.position += 1
            index += 1
        }
    }

    private mutating func checkDepth(_ depth: Int) throws(CanonicalJSONError) {
        guard depth <= self.limits.maximumDepth else {
            throw self.error(.tooDeep, "nesting deeper than \(self.limits.maximumDepth)")
        }
    }

    private mutating func parseObject(depth: Int) throws(CanonicalJSONError) -> JSONValue {
        try self.checkDepth(depth)
        let start = self.position
        self.position += 1  // {
        var members: [(name: JSONString, value: JSONValue)] = []
        self.skipWhitespace()
        if self.current == UInt8(ascii: "}") {
            self.position += 1
            return .object(try Self.object(members, at: start))
        }
        while true {
            self.skipWhitespace()
            guard self.current == UInt8(ascii: "\"") else {
                throw self.error(.syntax, "a member name (string) was expected")
            }
            let name = try self.parseString()
            self.skipWhitespace()
            guard self.current == UInt8(ascii: ":") else {
                throw self.error(.syntax, "':' was expected after a member name")
            }
            self.position += 1
            self.skipWhitespace()
            let value = try self.parseValue(depth: depth)
            members.append((name, value))
            self.skipWhitespace()
            switch self.current {
            case UInt8(ascii: ","):
                self.position += 1
            case UInt8(ascii: "}"):
                self.position += 1
                return .object(try Self.object(members, at: start))
            default:
                throw self.error(.syntax, "',' or '}' was expected in an object")
            }
        }
    }

    private static func object(
        _ members: [(name: JSONString, value: JSONValue)],
        at offset: Int
    ) throws(CanonicalJSONError) -> JSONObject {
        switch JSONObject.sorted(members) {
        case .success(let object):
            return object
        case .failure(let duplicate):
            throw CanonicalJSONError(
                code: .duplicateName,
                reason: "the object has two members named \"\(duplicate.name)\"",
                offset: offset
            )
        }
    }

    private mutating func parseArray(depth: Int) throws(CanonicalJSONError) -> JSONValue {
        try self.checkDepth(depth)
        self.position += 1  // [
        var elements: [JSONValue] = []
        self.skipWhitespace()
        if self.current == UInt8(ascii: "]") {
            self.position += 1
            return .array(elements)
        }
        while true {
            self.skipWhitespace()
            elements.append(try self.parseValue(depth: depth))
            self.skipWhitespace()
            switch self.current {
            case UInt8(ascii: ","):
                self.position += 1
            case UInt8(ascii: "]"):
                self.position += 1
                return .array(elements)
            default:
                throw self.error(.syntax, "',' or ']' was expected in an array")
            }
        }
    }

    // MARK: - Strings

    /// Parses a string, unescaping it and validating its UTF-8.
    private mutating func parseString() throws(CanonicalJSONError) -> JSONString {
        self.position += 1  // opening quote
        var output: [UInt8] = []
        while true {
            guard let byte = self.current else {
                throw self.error(.syntax, "unterminated string")
            }
            switch byte {
            case UInt8(ascii: "\""):
                self.position += 1
                return JSONString(validatedUTF8: output)
            case UInt8(ascii: "\\"):
                try self.parseEscape(into: &output)
            case 0x00..<0x20:
                throw self.error(.syntax, "a control character must be escaped in a string")
            case 0x20..<0x80:
                // A run of plain ASCII (no quote, backslash or control character) is copied at
                // once: base64 members of several KB are one run (`wrap --batch`'s lines).
                var end = self.position + 1
                while end < self.input.count {
                    let next = self.input[end]
                    guard next >= 0x20, next < 0x80, next != UInt8(ascii: "\""), next != UInt8(ascii: "\\") else { break }
                    end += 1
                }
                output.append(contentsOf: self.input[self.position..<end])
                self.position = end
            default:
                try self.copyMultibyteScalar(into: &output)
            }
        }
    }

    /// Copies one well-formed multi-byte UTF-8 sequence (Unicode Table 3-7), or throws.
    private mutating func copyMultibyteScalar(into output: inout [UInt8]) throws(CanonicalJSONError) {
        let start = self.position
        let lead = self.input[start]
        let length: Int
        var secondRange: ClosedRange<UInt8> = 0x80...0xBF
        switch lead {
        case 0xC2...0xDF: length = 2
        case 0xE0: length = 3; secondRange = 0xA0...0xBF  // no overlong forms
        case 0xE1...0xEC, 0xEE...0xEF: length = 3
        case 0xED: length = 3; secondRange = 0x80...0x9F  // no encoded surrogates
        case 0xF0: length = 4; secondRange = 0x90...0xBF  // no overlong forms
        case 0xF1...0xF3: length = 4
        case 0xF4: length = 4; secondRange = 0x80...0x8F  // nothing past U+10FFFF
        default:
            throw self.error(.invalidUTF8, "byte 0x\(String(lead, radix: 16)) cannot start a UTF-8 sequence")
        }
        guard start + length <= self.input.count else {
            throw self.error(.invalidUTF8, "truncated UTF-8 sequence")
        }
        guard secondRange.contains(self.input[start + 1]) else {
            throw self.error(.invalidUTF8, "ill-formed UTF-8 sequence")
        }
        var index = start + 2
        while index < start + length {
            guard (0x80...0xBF).contains(self.input[index]) else {
                throw self.error(.invalidUTF8, "ill-formed UTF-8 sequence")
            }
            index += 1
        }
        output.append(contentsOf: self.input[start..<(start + length)])
        self.position = start + length
    }

    private mutating func parseEscape(into output: inout [UInt8]) throws(CanonicalJSONError) {
        let start = self.position
        self.position += 1  // backslash
        guard let escaped = self.current else {
            throw self.error(.syntax, "unterminated escape")
        }
        self.position += 1
        switch escaped {
        case UInt8(ascii: "\""): output.append(0x22)
        case UInt8(ascii: "\\"): output.append(0x5C)
        case UInt8(ascii: "/"): output.append(0x2F)
        case UInt8(ascii: "b"): output.append(0x08)
        case UInt8(ascii: "f"): output.append(0x0C)
        case UInt8(ascii: "n"): output.append(0x0A)
        case UInt8(ascii: "r"): output.append(0x0D)
        case UInt8(ascii: "t"): output.append(0x09)
        case UInt8(ascii: "u"):
            var scalar = UInt32(try self.parseHex4())
            if (0xD800...0xDBFF).contains(scalar) {
                // A lead surrogate must be followed by an escaped trail surrogate.
                guard self.position + 1 < self.input.count, self.input[self.position] == UInt8(ascii: "\\"),
                    self.input[self.position + 1] == UInt8(ascii: "u")
                else {
                    throw self.error(.loneSurrogate, "a lead surrogate is not followed by a trail surrogate", at: start)
                }
                self.position += 2
                let trail = UInt32(try self.parseHex4())
                guard (0xDC00...0xDFFF).contains(trail) else {
                    throw self.error(.loneSurrogate, "a lead surrogate is not followed by a trail surrogate", at: start)
                }
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (trail - 0xDC00)
            } else if (0xDC00...0xDFFF).contains(scalar) {
                throw self.error(.loneSurrogate, "a trail surrogate without a lead surrogate", at: start)
            }
            Self.appendUTF8(scalar, to: &output)
        default:
            throw self.error(.syntax, "invalid escape \\\(Character(Unicode.Scalar(escaped)))", at: start)
        }
    }

    private mutating func parseHex4() throws(CanonicalJSONError) -> UInt16 {
        guard self.position + 4 <= self.input.count else {
            throw self.error(.syntax, "a \\u escape needs four hex digits")
        }
        var value: UInt16 = 0
        for _ in 0..<4 {
            let byte = self.input[self.position]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw self.error(.syntax, "a \\u escape needs four hex digits")
            }
            value = value << 4 | UInt16(digit)
            self.position += 1
        }
        return value
    }

    /// Appends a Unicode scalar (not a surrogate, at most U+10FFFF) as UTF-8.
    private static func appendUTF8(_ scalar: UInt32, to output: inout [UInt8]) {
        switch scalar {
        case 0..<0x80:
            output.append(UInt8(scalar))
        case 0x80..<0x800:
            output.append(UInt8(0xC0 | scalar >> 6))
            output.append(UInt8(0x80 | scalar & 0x3F))
        case 0x800..<0x10000:
            output.append(UInt8(0xE0 | scalar >> 12))
            output.append(UInt8(0x80 | scalar >> 6 & 0x3F))
            output.append(UInt8(0x80 | scalar & 0x3F))
        default:
            output.append(UInt8(0xF0 | scalar >> 18))
            output.append(UInt8(0x80 | scalar >> 12 & 0x3F))
            output.append(UInt8(0x80 | scalar >> 6 & 0x3F))
            output.append(UInt8(0x80 | scalar & 0x3F))
        }
    }

    // MARK: - Members without their values (JSONObjectMembers)

    /// Reads the whole input as one JSON object and returns its members, each with where its value
    /// lies, after checking every nested value exactly as ``parseDocument()`` does (the same
    /// limits, duplicate names, UTF-8, escapes, surrogates, numbers) but without building any.
    mutating func scanDocumentMembers() throws(CanonicalJSONError) -> [JSONObjectMembers.Member] {
        guard self.input.count <= self.limits.maximumSize else {
            throw CanonicalJSONError(
                code: .tooLarge,
                reason: "\(self.input.count) bytes; the limit is \(self.limits.maximumSize)",
                offset: 0
            )
        }
        self.skipWhitespace()
        guard self.current == UInt8(ascii: "{") else {
            throw self.error(.syntax, "the JSON text is not an object")
        }
        let members = try self.scanObject(depth: 1)
        self.skipWhitespace()
        guard self.position == self.input.count else {
            throw self.error(.syntax, "unexpected data after the JSON value")
        }
        return members
    }

    /// The members of the object that starts at `offset`, a value already checked by
    /// ``scanDocumentMembers()`` (so the limits were already applied to it).
    mutating func scanMembers(ofObjectAt offset: Int) throws(CanonicalJSONError) -> [JSONObjectMembers.Member] {
        self.position = offset
        return try self.scanObject(depth: 1)
    }

    /// The elements of the array that starts at `offset`, a value already checked by
    /// ``scanDocumentMembers()``.
    mutating func scanElements(ofArrayAt offset: Int) throws(CanonicalJSONError) -> [JSONObjectMembers.Value] {
        self.position = offset + 1  // [
        var elements: [JSONObjectMembers.Value] = []
        self.skipWhitespace()
        if self.current == UInt8(ascii: "]") { return elements }
        while true {
            self.skipWhitespace()
            elements.append(try self.scanValue(depth: 1))
            self.skipWhitespace()
            switch self.current {
            case UInt8(ascii: ","):
                self.position += 1
            case UInt8(ascii: "]"):
                return elements
            default:
                throw self.error(.syntax, "',' or ']' was expected in an array")
            }
        }
    }

    /// The unescaped bytes of the string whose opening quote is at `offset`.
    mutating func unescapedString(at offset: Int) throws(CanonicalJSONError) -> [UInt8] {
        self.position = offset
        return try self.parseString().utf8
    }

    /// Checks one value as ``parseValue(depth:)`` does and says where it lies.
    private mutating func scanValue(depth: Int) throws(CanonicalJSONError) -> JSONObjectMembers.Value {
        guard let byte = self.current else {
            throw self.error(.syntax, "unexpected end of input, a value was expected")
        }
        let start = self.position
        let kind: JSONObjectMembers.Kind
        switch byte {
        case UInt8(ascii: "{"):
            _ = try self.scanObject(depth: depth + 1)
            kind = .object
        case UInt8(ascii: "["):
            try self.skipArray(depth: depth + 1)
            kind = .array
        case UInt8(ascii: "\""):
            let escaped = try self.skipString()
            // A string's range is its content, between the quotes.
            return JSONObjectMembers.Value(kind: .string, range: (start + 1)..<(self.position - 1), escaped: escaped)
        case UInt8(ascii: "t"):
            try self.expectLiteral("true")
            kind = .bool(true)
        case UInt8(ascii: "f"):
            try self.expectLiteral("false")
            kind = .bool(false)
        case UInt8(ascii: "n"):
            try self.expectLiteral("null")
            kind = .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            _ = try self.parseNumber()
            kind = .number
        default:
            throw self.error(.syntax, "unexpected byte 0x\(String(byte, radix: 16)), a value was expected")
        }
        return JSONObjectMembers.Value(kind: kind, range: start..<self.position, escaped: false)
    }

    /// Checks an object as ``parseObject(depth:)`` does, duplicate names included, and returns its
    /// members without building their values.
    private mutating func scanObject(depth: Int) throws(CanonicalJSONError) -> [JSONObjectMembers.Member] {
        try self.checkDepth(depth)
        let start = self.position
        self.position += 1  // {
        var members: [JSONObjectMembers.Member] = []
        self.skipWhitespace()
        if self.current == UInt8(ascii: "}") {
            self.position += 1
            return members
        }
        while true {
            self.skipWhitespace()
            guard self.current == UInt8(ascii: "\"") else {
                throw self.error(.syntax, "a member name (string) was expected")
            }
            let nameStart = self.position
            let name: ArraySlice<UInt8>
            if try self.skipString() {
                // A name with escapes is compared by its unescaped code units, as parseObject does.
                let end = self.position
                self.position = nameStart
                name = ArraySlice(try self.parseString().utf8)
                self.position = end
            } else {
                name = self.input[(nameStart + 1)..<(self.position - 1)]
            }
            self.skipWhitespace()
            guard self.current == UInt8(ascii: ":") else {
                throw self.error(.syntax, "':' was expected after a member name")
            }
            self.position += 1
            self.skipWhitespace()
            let value = try self.scanValue(depth: depth)
            members.append(JSONObjectMembers.Member(name: name, value: value))
            self.skipWhitespace()
            switch self.current {
            case UInt8(ascii: ","):
                self.position += 1
            case UInt8(ascii: "}"):
                self.position += 1
                try Self.checkDistinctNames(members, at: start)
                return members
            default:
                throw self.error(.syntax, "',' or '}' was expected in an object")
            }
        }
    }

    /// Refuses two members with the same name, as ``object(_:at:)`` does.
    private static func checkDistinctNames(_ members: [JSONObjectMembers.Member], at offset: Int) throws(CanonicalJSONError) {
        var duplicate: ArraySlice<UInt8>?
        if members.count <= 16 {
            // Few members (every WebAuthn object): compare each pair.
            search: for index in members.indices {
                for other in members[(index + 1)...] where other.name.elementsEqual(members[index].name) {
                    duplicate = other.name
                    break search
                }
            }
        } else {
            // Many members: sort the names, so that hostile input costs n log n, not n².
            let names = members.map(\.name).sorted { $0.lexicographicallyPrecedes($1) }
            for (previous, next) in zip(names, names.dropFirst()) where previous.elementsEqual(next) {
                duplicate = previous
                break
            }
        }
        if let duplicate {
            throw CanonicalJSONError(
                code: .duplicateName,
                reason: "the object has two members named \"\(String(decoding: duplicate, as: UTF8.self))\"",
                offset: offset
            )
        }
    }

    /// Checks an array as ``parseArray(depth:)`` does, without building it.
    private mutating func skipArray(depth: Int) throws(CanonicalJSONError) {
        try self.checkDepth(depth)
        self.position += 1  // [
        self.skipWhitespace()
        if self.current == UInt8(ascii: "]") {
            self.position += 1
            return
        }
        while true {
            self.skipWhitespace()
            _ = try self.scanValue(depth: depth)
            self.skipWhitespace()
            switch self.current {
            case UInt8(ascii: ","):
                self.position += 1
            case UInt8(ascii: "]"):
                self.position += 1
                return
            default:
                throw self.error(.syntax, "',' or ']' was expected in an array")
            }
        }
    }

    /// Checks a string as ``parseString()`` does without copying it; `true` when it has escapes
    /// (its content then differs from its bytes).
    private mutating func skipString() throws(CanonicalJSONError) -> Bool {
        self.position += 1  // opening quote
        var escaped = false
        // Escapes and multi-byte characters are checked by the same code as parseString's, into a
        // buffer that is thrown away (and allocated only if the string has one).
        var discarded: [UInt8] = []
        while true {
            // The common case first: a run of printable ASCII other than '"' and '\\'.
            while self.position < self.input.count {
                let byte = self.input[self.position]
                guard byte >= 0x20, byte < 0x80, byte != UInt8(ascii: "\""), byte != UInt8(ascii: "\\") else { break }
                self.position += 1
            }
            guard let byte = self.current else {
                throw self.error(.syntax, "unterminated string")
            }
            switch byte {
            case UInt8(ascii: "\""):
                self.position += 1
                return escaped
            case UInt8(ascii: "\\"):
                escaped = true
                try self.parseEscape(into: &discarded)
            case 0x00..<0x20:
                throw self.error(.syntax, "a control character must be escaped in a string")
            case 0x20..<0x80:
                self.position += 1
            default:
                try self.copyMultibyteScalar(into: &discarded)
            }
        }
    }

    // MARK: - Numbers

    /// Parses `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?` into the nearest double.
    private mutating func parseNumber() throws(CanonicalJSONError) -> Double {
        let start = self.position
        if self.current == UInt8(ascii: "-") { self.position += 1 }
        guard let first = self.current, Self.isDigit(first) else {
            throw self.error(.syntax, "a digit was expected in a number", at: start)
        }
        if first == UInt8(ascii: "0") {
            self.position += 1
            if let next = self.current, Self.isDigit(next) {
                throw self.error(.syntax, "a number cannot have a leading zero", at: start)
            }
        } else {
            self.skipDigits()
        }
        if self.current == UInt8(ascii: ".") {
            self.position += 1
            guard let digit = self.current, Self.isDigit(digit) else {
                throw self.error(.syntax, "a digit was expected after the decimal point", at: start)
            }
            self.skipDigits()
        }
        if self.current == UInt8(ascii: "e") || self.current == UInt8(ascii: "E") {
            self.position += 1
            if self.current == UInt8(ascii: "+") || self.current == UInt8(ascii: "-") { self.position += 1 }
            guard let digit = self.current, Self.isDigit(digit) else {
                throw self.error(.syntax, "a digit was expected in the exponent", at: start)
            }
            self.skipDigits()
        }
        // The grammar above admits only what Swift's correctly rounded decimal parser accepts.
        let text = String(decoding: self.input[start..<self.position], as: UTF8.self)
        guard let value = Double(text) else {
            throw self.error(.syntax, "unparseable number", at: start)
        }
        guard value.isFinite else {
            throw self.error(.numberOutOfRange, "\(text) does not fit an IEEE 754 double", at: start)
        }
        if self.limits.exactNumbers {
            guard value.magnitude <= 9_007_199_254_740_992 else {
                throw self.error(.inexactNumber, "\(text.prefix(40)) is beyond ±2^53; send such values as strings", at: start)
            }
            // The text's decimal value must be the double's own (its shortest round-trip digits).
            guard DecimalDigits(self.input[start..<self.position]) == DecimalDigits(Array(value.description.utf8)) else {
                throw self.error(.inexactNumber, "\(text.prefix(40)) has more precision than a double keeps; send it as a string", at: start)
            }
        }
        return value
    }

    private static func isDigit(_ byte: UInt8) -> Bool {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
    }

    private mutating func skipDigits() {
        while let byte = self.current, Self.isDigit(byte) {
            self.position += 1
        }
    }
}

/// A decimal number's value as significant digits and a power of ten: `1234.50`, `1.2345e3` and
/// `12345e-1` are all ("12345", -1). Zero is ("", 0) whatever its sign or spelling.
struct DecimalDigits: Equatable {
    var digits: [UInt8] = []
    var exponent = 0

    /// Reads `-?digits(.digits)?([eE][+-]?digits)?` (the JSON grammar, which Swift's `description`
    /// of a finite double also follows, with `e+`); the sign plays no part.
    init(_ text: some Collection<UInt8>) {
        var fractionDigits = 0
        var inFraction = false
        var index = text.startIndex
        while index != text.endIndex {
            let byte = text[index]
            if byte == UInt8(ascii: "e") || byte == UInt8(ascii: "E") { break }
            if byte == UInt8(ascii: ".") {
                inFraction = true
            } else if byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") {
                if !(self.digits.isEmpty && byte == UInt8(ascii: "0")) { self.digits.append(byte) }  // no leading zeros
                if inFraction { fractionDigits += 1 }
            }
            index = text.index(after: index)
        }
        var exponent = 0
        var negative = false
        if index != text.endIndex {
            index = text.index(after: index)
            for byte in text[index...] {
                if byte == UInt8(ascii: "-") {
                    negative = true
                } else if byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") {
                    // Saturates: an exponent this large already failed (overflow) or went to zero.
                    exponent = min(exponent * 10 + Int(byte - UInt8(ascii: "0")), 1_000_000)
                }
            }
        }
        guard !self.digits.isEmpty else { return }  // zero
        self.exponent = (negative ? -exponent : exponent) - fractionDigits
        while self.digits.last == UInt8(ascii: "0") {
            self.digits.removeLast()
            self.exponent += 1
        }
    }
}
