//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CBOR
import FormAttestTestSupport
import Foundation
import Testing

struct CBORDecoderTests {
    static func bytes(_ hex: String) throws -> [UInt8] { try RealSample.hex(hex.replacingOccurrences(of: " ", with: "")) }

    @Test(
        "well-formed items decode to their values",
        arguments: [
            ("00", CBORItem.Value.unsigned(0)),
            ("17", .unsigned(23)),
            ("18 18", .unsigned(24)),
            ("19 0100", .unsigned(256)),
            ("1a 00010000", .unsigned(65536)),
            ("1b 0000000100000000", .unsigned(1 << 32)),
            ("20", .negative(0)),
            ("38 63", .negative(99)),
            ("43 010203", .byteString([1, 2, 3])),
            ("62 c3a9", .textString("é")),
            ("f4", .boolean(false)),
            ("f5", .boolean(true)),
            ("f6", .null),
            ("f7", .undefined),
            ("f0", .simple(16)),
            ("f8 20", .simple(32)),
            ("f9 3c00", .float(1.0)),
            ("fa 47c35000", .float(100_000.0)),
            ("fb 3ff199999999999a", .float(1.1)),
        ]
    )
    func decodesScalars(hex: String, expected: CBORItem.Value) throws {
        #expect(try CBORDecoder.decode(Self.bytes(hex)).value == expected)
    }

    @Test("items keep their byte ranges and header lengths")
    func keepsRanges() throws {
        // {"a": 1, "b": [2, 3]}
        let item = try CBORDecoder.decode(Self.bytes("a2 6161 01 6162 82 02 03"))
        #expect(item.range == 0..<9)
        #expect(item.headerLength == 1)
        let entries = try #require(item.mapEntries)
        #expect(entries[0].key.range == 1..<3)
        #expect(entries[0].value.range == 3..<4)
        #expect(entries[1].value.range == 6..<9)
        #expect(entries[1].value.arrayElements?.map(\.range) == [7..<8, 8..<9])
        #expect(item[textKey: "b"]?.arrayElements?.map(\.integer) == [2, 3])

        let tagged = try CBORDecoder.decode(Self.bytes("d8 20 63 616263"))
        guard case .tagged(let tag, let inner) = tagged.value else {
            Issue.record("not a tagged item: \(tagged.value)")
            return
        }
        #expect(tag == 32)
        #expect(inner.textString == "abc")
        #expect(inner.range == 2..<6)
        #expect(tagged.headerLength == 2)
    }

    @Test(
        "malformed or non-preferred input is rejected with a reason",
        arguments: [
            ("", "ends"),
            ("18", "ends"),  // argument byte missing
            ("43 0102", "exceeds"),  // byte string longer than the input
            ("82 01", "exceeds"),  // array shorter than declared: refused by the up-front length check
            ("18 17", "shortest"),  // 23 in two bytes
            ("19 00ff", "shortest"),
            ("1a 0000ffff", "shortest"),
            ("1b 00000000ffffffff", "shortest"),
            ("5f 41 00 ff", "indefinite"),
            ("9f ff", "indefinite"),
            ("bf ff", "indefinite"),
            ("ff", "break"),
            ("1c", "reserved"),
            ("1d", "reserved"),
            ("1e", "reserved"),
            ("a2 01 01 01 02", "duplicate"),
            ("a2 6161 01 6161 02", "duplicate"),
            ("62 c328", "UTF-8"),
            ("61 80", "UTF-8"),
            ("00 00", "trailing"),
            ("f8 10", "simple"),
            ("5a ffffffff", "exceeds"),  // a 4 GiB byte string in 5 bytes: refused before allocating
            ("9b ffffffffffffffff", "exceeds"),
            ("bb 7fffffffffffffff", "exceeds"),
        ]
    )
    func rejects(hex: String, reasonFragment: String) throws {
        let error = try #require(throws: CBORError.self) { try CBORDecoder.decode(Self.bytes(hex)) }
        #expect(error.code == .malformed)
        #expect(error.reason.contains(reasonFragment), "\(error.reason)")
    }

    @Test("nesting is capped at 16 levels")
    func depthLimit() throws {
        let sixteen = [UInt8](repeating: 0x81, count: 15) + [0x00]
        #expect(throws: Never.self) { try CBORDecoder.decode(sixteen) }
        let seventeen = [UInt8](repeating: 0x81, count: 16) + [0x00]
        let error = try #require(throws: CBORError.self) { try CBORDecoder.decode(seventeen) }
        #expect(error.reason.contains("deeper than 16"))
        let tags = [UInt8](repeating: 0xC1, count: 16) + [0x00]
        #expect(throws: CBORError.self) { try CBORDecoder.decode(tags) }
    }

    @Test("the item count is capped")
    func itemLimit() throws {
        let many = [0x99, 0x10, 0x00] + [UInt8](repeating: 0x00, count: 4096)  // 4097 items
        let error = try #require(throws: CBORError.self) { try CBORDecoder.decode(many) }
        #expect(error.reason.contains("more than 4096 items"))
        let fewer = [0x99, 0x0F, 0xFF] + [UInt8](repeating: 0x00, count: 4095)  // 4096 items
        #expect(try CBORDecoder.decode(fewer).arrayElements?.count == 4095)
    }

    @Test("decodePrefix reads one item and reports its length")
    func prefix() throws {
        let (item, consumed) = try CBORDecoder.decodePrefix(Self.bytes("a1 01 02 ff ff"))
        #expect(consumed == 3)
        #expect(item[integerKey: 1]?.integer == 2)
    }
}

struct CBORSerializerTests {
    @Test(
        "integers use their shortest form",
        arguments: [
            (Int64(0), "00"), (23, "17"), (24, "1818"), (255, "18ff"), (256, "190100"), (65535, "19ffff"),
            (65536, "1a00010000"), (4_294_967_296, "1b0000000100000000"), (-1, "20"), (-24, "37"), (-25, "3818"),
            (Int64.min, "3b7fffffffffffffff"),
        ]
    )
    func integers(value: Int64, hex: String) throws {
        let bytes = CBORSerializer.serialize { $0.appendInteger(value) }
        #expect(bytes == (try RealSample.hex(hex)))
        #expect(try CBORDecoder.decode(bytes).integer == value)
    }

    @Test("map keys are sorted by their encoded bytes (RFC 8949 §4.2.1)")
    func canonicalMapOrder() throws {
        var serializer = CBORSerializer()
        try serializer.appendMap([
            (.text("b"), { $0.appendInteger(1) }),
            (.integer(-1), { $0.appendInteger(2) }),
            (.text("a"), { $0.appendInteger(3) }),
            (.integer(10), { $0.appendInteger(4) }),
            (.integer(1), { $0.appendInteger(5) }),
            (.text("aa"), { $0.appendInteger(6) }),
        ])
        // 01, 0a, 20, 61 'a', 61 'b', 62 'aa'
        #expect(serializer.bytes == (try RealSample.hex("a6" + "0105" + "0a04" + "2002" + "616103" + "616201" + "62616106")))
        #expect(try CBORDecoder.decode(serializer.bytes).mapEntries?.count == 6)
    }

    @Test("a map with a duplicate key is refused")
    func duplicateKey() throws {
        var serializer = CBORSerializer()
        #expect(throws: CBORError(code: .duplicateMapKey, reason: "")) {
            try serializer.appendMap([(.integer(1), { $0.appendInteger(1) }), (.integer(1), { $0.appendInteger(2) })])
        }
    }

    @Test("strings, booleans and arrays round-trip through the decoder")
    func roundTrip() throws {
        let bytes = CBORSerializer.serialize { serializer in
            serializer.appendArrayHeader(count: 4)
            serializer.appendTextString("héllo")
            serializer.appendByteString([0, 255])
            serializer.appendBoolean(true)
            serializer.appendByteString([UInt8](repeating: 9, count: 300))
        }
        let elements = try #require(try CBORDecoder.decode(bytes).arrayElements)
        #expect(elements[0].textString == "héllo")
        #expect(elements[1].byteString == [0, 255])
        #expect(elements[2].value == .boolean(true))
        #expect(elements[3].byteString?.count == 300)
        #expect(elements[3].headerLength == 3)
    }
}
