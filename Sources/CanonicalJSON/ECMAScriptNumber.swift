//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// ECMAScript's Number::toString (ECMA-262 §6.1.6.1.20), which RFC 8785 §3.2.2.3 adopts.
///
/// The algorithm needs the shortest decimal digits `s` (k digits) and exponent `n` with
/// `s × 10^(n−k)` closest to the value among those that round-trip. Swift's `description` of a
/// `Double` prints exactly those digits (it is a shortest, closest round-trip printer), so they
/// are read back from it and laid out by ECMAScript's rules; every line of the 100,000-number
/// conformance file checks this.
enum ECMAScriptNumber {
    static func string(_ value: Double) -> String {
        var bytes: [UInt8] = []
        self.append(value, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Appends the ECMAScript form of a finite double. (The parser refuses non-finite numbers.)
    static func append(_ value: Double, to output: inout [UInt8]) {
        precondition(value.isFinite, "RFC 8785 numbers are finite; the parser guarantees it")
        if value == 0 {
            output.append(UInt8(ascii: "0"))  // 0 and -0 both print "0"
            return
        }
        if value < 0 { output.append(UInt8(ascii: "-")) }

        // Shortest round-trip digits from Swift, e.g. "1.2345678901234568e+20", "1e-07", "100.0".
        var digits: [UInt8] = []
        digits.reserveCapacity(17)
        var pointPosition = 0  // digits before the decimal point, in the printed mantissa
        var seenPoint = false
        var exponent = 0
        var exponentSign = 1
        var inExponent = false
        for byte in value.magnitude.description.utf8 {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"):
                if inExponent {
                    exponent = exponent * 10 + Int(byte - UInt8(ascii: "0"))
                } else {
                    digits.append(byte)
                    if !seenPoint { pointPosition += 1 }
                }
            case UInt8(ascii: "."): seenPoint = true
            case UInt8(ascii: "e"), UInt8(ascii: "E"): inExponent = true
            case UInt8(ascii: "-"): exponentSign = -1
            default: break  // "+"
            }
        }
        var n = pointPosition + exponentSign * exponent
        // Normalize: drop leading zeros (moving the point) and trailing zeros.
        var leading = 0
        while leading < digits.count - 1, digits[leading] == UInt8(ascii: "0") {
            leading += 1
            n -= 1
        }
        var end = digits.count
        while end > leading + 1, digits[end - 1] == UInt8(ascii: "0") {
            end -= 1
        }
        let s = digits[leading..<end]
        let k = s.count

        if k <= n && n <= 21 {
            // Integer: the digits followed by n-k zeros.
            output.append(contentsOf: s)
            output.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: n - k))
        } else if 0 < n && n <= 21 {
            // Decimal point inside the digits.
            output.append(contentsOf: s.prefix(n))
            output.append(UInt8(ascii: "."))
            output.append(contentsOf: s.dropFirst(n))
        } else if -6 < n && n <= 0 {
            // 0.000ddd
            output.append(contentsOf: [UInt8(ascii: "0"), UInt8(ascii: ".")])
            output.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: -n))
            output.append(contentsOf: s)
        } else {
            // Exponential: d[.ddd]e±x with x = n-1.
            output.append(s[s.startIndex])
            if k > 1 {
                output.append(UInt8(ascii: "."))
                output.append(contentsOf: s.dropFirst())
            }
            output.append(UInt8(ascii: "e"))
            output.append(n - 1 >= 0 ? UInt8(ascii: "+") : UInt8(ascii: "-"))
            output.append(contentsOf: String((n - 1).magnitude).utf8)
        }
    }
}
