//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

// libFuzzer target: the strict RFC 8785 parser and canonicalizer. Any input must either be
// rejected with CanonicalJSONError or canonicalize to bytes that are their own canonical form.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    if let canonical = try? CanonicalJSON.canonicalize(bytes) {
        let again = try? CanonicalJSON.canonicalize(canonical)
        precondition(again == canonical, "canonical output is not a fixed point")
    }
    return 0
}
