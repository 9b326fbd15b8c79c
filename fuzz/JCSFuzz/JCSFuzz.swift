//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

// libFuzzer target: the strict RFC 8785 parser and canonicalizer. Any input must either be
// rejected with CanonicalJSONError or canonicalize to bytes that are their own canonical form.
// Built by scripts/fuzz through SwiftPM (FORMATTEST_FUZZ=1 adds this target) from the CanonicalJSON module.

import CanonicalJSON
import FuzzDriver

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    if let canonical = try? CanonicalJSON.canonicalize(bytes) {
        let again = try? CanonicalJSON.canonicalize(canonical)
        precondition(again == canonical, "canonical output is not a fixed point")
    }
    return 0
}

// SwiftPM links an executable target's entry point as `<module>_main` (see FuzzDriver).
@_cdecl("JCSFuzz_main")
public func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> Int32 {
    FuzzDriver.run(argc, argv) { data, size in fuzz(data, size) }
}
