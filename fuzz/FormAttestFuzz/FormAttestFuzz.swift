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
import FuzzDriver

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

// SwiftPM links an executable target's entry point as `<module>_main` (see FuzzDriver).
@_cdecl("FormAttestFuzz_main")
public func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> Int32 {
    FuzzDriver.run(argc, argv) { data, size in fuzz(data, size) }
}
