//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// Big-endian reads over the bytes of a TPM structure (TPM 2.0 Part 2), every read bounded.
struct TPMReader {
    private var bytes: ArraySlice<UInt8>
    private let what: String

    init(_ bytes: [UInt8], what: String) {
        self.bytes = bytes[...]
        self.what = what
    }

    var isAtEnd: Bool { self.bytes.isEmpty }

    mutating func bytes(_ count: Int) throws(WebAuthnError) -> [UInt8] {
        guard count <= self.bytes.count else {
            throw WebAuthnError.malformedAttestation("tpm \(self.what) is truncated")
        }
        let read = Array(self.bytes.prefix(count))
        self.bytes = self.bytes.dropFirst(count)
        return read
    }

    mutating func uint16() throws(WebAuthnError) -> UInt16 {
        let read = try self.bytes(2)
        return UInt16(read[0]) << 8 | UInt16(read[1])
    }

    mutating func uint32() throws(WebAuthnError) -> UInt32 {
        let read = try self.bytes(4)
        return read.reduce(0) { $0 << 8 | UInt32($1) }
    }

    /// A TPM2B: a 16-bit size, then that many bytes.
    mutating func sized() throws(WebAuthnError) -> [UInt8] {
        try self.bytes(Int(try self.uint16()))
    }
}

/// TPM algorithm identifiers (TPM 2.0 Part 2, TPM_ALG_ID) that WebAuthn's `tpm` format meets.
enum TPMAlgorithm {
    static let rsa: UInt16 = 0x0001
    static let sha1: UInt16 = 0x0004
    static let sha256: UInt16 = 0x000B
    static let sha384: UInt16 = 0x000C
    static let sha512: UInt16 = 0x000D
    static let null: UInt16 = 0x0010
    static let ecc: UInt16 = 0x0023
    /// TPM_ECC_CURVE: NIST P-256.
    static let curveP256: UInt16 = 0x0003
}

/// `pubArea`: the TPMT_PUBLIC of the credential key (TPM 2.0 Part 2, 12.2.4), read whole.
struct TPMPublicArea {
    enum Key: Equatable {
        /// The modulus and the exponent (0 in the structure means 65537; stored here as read).
        case rsa(modulus: [UInt8], exponent: UInt32)
        case ecc(curve: UInt16, x: [UInt8], y: [UInt8])
    }

    /// The exact bytes (the Name is their hash).
    let rawValue: [UInt8]
    /// nameAlg: the hash of the Name.
    let nameAlgorithm: UInt16
    let key: Key

    init(bytes: [UInt8]) throws(WebAuthnError) {
        var reader = TPMReader(bytes, what: "pubArea")
        let type = try reader.uint16()
        self.nameAlgorithm = try reader.uint16()
        _ = try reader.uint32()  // objectAttributes
        _ = try reader.sized()  // authPolicy
        // parameters: TPMT_SYM_DEF_OBJECT (an algorithm, with key bits and mode unless null), a scheme
        // (with its hash unless null), then the key type's own fields.
        func symmetricAndScheme() throws(WebAuthnError) {
            if try reader.uint16() != TPMAlgorithm.null { _ = try reader.bytes(4) }
            if try reader.uint16() != TPMAlgorithm.null { _ = try reader.bytes(2) }
        }
        switch type {
        case TPMAlgorithm.rsa:
            try symmetricAndScheme()
            _ = try reader.uint16()  // keyBits
            let exponent = try reader.uint32()
            self.key = .rsa(modulus: try reader.sized(), exponent: exponent)
        case TPMAlgorithm.ecc:
            try symmetricAndScheme()
            let curve = try reader.uint16()
            if try reader.uint16() != TPMAlgorithm.null { _ = try reader.bytes(2) }  // kdf
            let x = try reader.sized()
            self.key = .ecc(curve: curve, x: x, y: try reader.sized())
        default:
            throw WebAuthnError.malformedAttestation("tpm pubArea's type 0x\(String(type, radix: 16)) is neither RSA nor ECC")
        }
        guard reader.isAtEnd else {
            throw WebAuthnError.malformedAttestation("tpm pubArea has trailing bytes")
        }
        self.rawValue = bytes
    }
}

/// `certInfo`: the TPMS_ATTEST the AIK signed (TPM 2.0 Part 2, 10.12.12), of type TPM_ST_ATTEST_CERTIFY.
struct TPMCertifyInfo {
    /// TPM_GENERATED_VALUE.
    static let magic: UInt32 = 0xFF54_4347
    /// TPM_ST_ATTEST_CERTIFY.
    static let certifyType: UInt16 = 0x8017

    /// The exact bytes (what `sig` signs).
    let rawValue: [UInt8]
    let extraData: [UInt8]
    /// attested.name: nameAlg ‖ H(pubArea) of the certified key.
    let attestedName: [UInt8]

    init(bytes: [UInt8]) throws(WebAuthnError) {
        var reader = TPMReader(bytes, what: "certInfo")
        guard try reader.uint32() == Self.magic else {
            throw WebAuthnError.malformedAttestation("tpm certInfo's magic is not TPM_GENERATED_VALUE")
        }
        guard try reader.uint16() == Self.certifyType else {
            throw WebAuthnError.malformedAttestation("tpm certInfo's type is not TPM_ST_ATTEST_CERTIFY")
        }
        _ = try reader.sized()  // qualifiedSigner
        self.extraData = try reader.sized()
        _ = try reader.bytes(17)  // clockInfo: clock, resetCount, restartCount, safe
        _ = try reader.bytes(8)  // firmwareVersion
        self.attestedName = try reader.sized()
        _ = try reader.sized()  // attested.qualifiedName
        guard reader.isAtEnd else {
            throw WebAuthnError.malformedAttestation("tpm certInfo has trailing bytes")
        }
        self.rawValue = bytes
    }
}
