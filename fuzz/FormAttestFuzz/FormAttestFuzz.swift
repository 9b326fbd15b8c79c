//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

// libFuzzer target: the whole attestation object (CBOR, x5c certificates through swift-certificates,
// the receipt's CMS/BER parser and payload) and the inspector's three views of any input.
// Built by scripts/fuzz through SwiftPM (FORMATTEST_FUZZ=1 adds this target; it needs X.509).
// Any input must parse or throw; a trap or a sanitizer report is a finding.

import AppAttest
import AppAttestInspector

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    if let object = try? AttestationObject(cborEncoded: bytes) {
        _ = try? object.statement.parsedCertificates()
        _ = try? object.statement.unverifiedCredentialPublicKey()
        if let receipt = try? AppAttestReceipt(berEncoded: object.statement.receipt) {
            precondition(receipt.signer.certificateIndex < receipt.certificatesDER.count)
        }
    }
    if let receipt = try? AppAttestReceipt(berEncoded: bytes) {
        precondition(!receipt.content.isEmpty || receipt.payload.fields.isEmpty)
    }
    for mode in InspectionMode.allCases {
        let inspection = Inspection(bytes, mode: mode)
        precondition(!inspection.text.isEmpty && !inspection.jsonText.isEmpty)
    }
    return 0
}

// SwiftPM links an executable target's entry point as `<module>_main`; hand it to libFuzzer's driver
// (LLVMFuzzerRunDriver, part of the libFuzzer that -sanitize=fuzzer links).
@_silgen_name("LLVMFuzzerRunDriver")
func runFuzzerDriver(
    _ argc: UnsafeMutablePointer<Int32>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> Int32
) -> Int32

@_cdecl("FormAttestFuzz_main")
public func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> Int32 {
    var count = argc
    var arguments: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = argv
    return runFuzzerDriver(&count, &arguments) { data, size in fuzz(data, size) }
}
