//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import SwiftASN1
public import X509

extension ASN1ObjectIdentifier {
    /// Apple's App Attest extensions in the credential certificate.
    public enum AppAttest {
        /// 1.2.840.113635.100.8.2: `SEQUENCE { [1] EXPLICIT OCTET STRING nonce }`.
        public static let nonce: ASN1ObjectIdentifier = [1, 2, 840, 113_635, 100, 8, 2]
        /// 1.2.840.113635.100.8.5: device and app properties; the app id sits under `[1204]`.
        public static let appProperties: ASN1ObjectIdentifier = [1, 2, 840, 113_635, 100, 8, 5]
        /// 1.2.840.113635.100.8.7: OS properties; the OS version sits under `[1400]`.
        public static let osProperties: ASN1ObjectIdentifier = [1, 2, 840, 113_635, 100, 8, 7]
        /// 1.2.840.113635.100.8.6: the key's access-control property ("ACL blob"): macOS 27 leaves
        /// and Apple's 2026 iOS sample carry it.
        public static let accessControl: ASN1ObjectIdentifier = [1, 2, 840, 113_635, 100, 8, 6]
    }
}

extension Certificate {
    /// The nonce from the App Attest nonce extension (1.2.840.113635.100.8.2).
    ///
    /// The extension value must be exactly `30 24 A1 22 04 20 <32 bytes>`: a SEQUENCE holding one
    /// `[1]` explicit tag holding one 32-byte OCTET STRING. Apple's prose omits the `[1]`; every real
    /// certificate has it.
    ///
    /// - Throws: ``AppAttestError/Code/nonceExtensionInvalid`` when absent or of another shape.
    public func appAttestNonce() throws(AppAttestError) -> [UInt8] {
        guard let ext = self.extensions[oid: .AppAttest.nonce] else {
            throw AppAttestError(code: .nonceExtensionInvalid, reason: "the leaf has no extension 1.2.840.113635.100.8.2")
        }
        let nonce: ASN1OctetString
        do {
            let root = try DER.parse(ext.value)
            nonce = try DER.sequence(root, identifier: .sequence) { nodes in
                try DER.explicitlyTagged(&nodes, tagNumber: 1, tagClass: .contextSpecific) { node in
                    try ASN1OctetString(derEncoded: node)
                }
            }
        } catch {
            throw AppAttestError(
                code: .nonceExtensionInvalid,
                reason: "extension 1.2.840.113635.100.8.2 is not SEQUENCE { [1] { OCTET STRING } }: \(error)"
            )
        }
        guard nonce.bytes.count == 32 else {
            throw AppAttestError(
                code: .nonceExtensionInvalid,
                reason: "the nonce is \(nonce.bytes.count) bytes; SHA-256 gives 32"
            )
        }
        return Array(nonce.bytes)
    }

    /// The OS version from extension 1.2.840.113635.100.8.7 (`[1400]`), such as `"17.2.1"`.
    ///
    /// Informational only: no verification step depends on it, so an absent or unreadable value
    /// is `nil` rather than an error.
    public var appAttestOSVersion: String? {
        self.appAttestTaggedString(in: .AppAttest.osProperties, tagNumber: 1400)
    }

    /// The DER value of the access-control extension (1.2.840.113635.100.8.6), exactly as the
    /// certificate carries it, or `nil` when the certificate has none.
    ///
    /// It is reported as bytes and compared as bytes (``AppAttestPolicy/requiredAccessControl``);
    /// its inner structure (in Apple's 2026 sample `SEQUENCE { [3] { OCTET STRING { SEQUENCE {
    /// UTF8String, SEQUENCE OF { UTF8String, [1] ... } } } } }`) is undocumented, so only the
    /// inspector decodes it, to show it.
    public var appAttestAccessControl: [UInt8]? {
        self.extensions[oid: .AppAttest.accessControl].map { Array($0.value) }
    }

    /// The app id that Apple wrote into extension 1.2.840.113635.100.8.5 (`[1204]`), when readable.
    ///
    /// Informational: the verifier binds the app id through rpIdHash (step 6), as Apple documents.
    public var appAttestAppID: String? {
        self.appAttestTaggedString(in: .AppAttest.appProperties, tagNumber: 1204)
    }

    /// Reads `SEQUENCE { ..., [tag] EXPLICIT OCTET STRING (UTF-8), ... }` from an Apple extension.
    private func appAttestTaggedString(in oid: ASN1ObjectIdentifier, tagNumber: UInt) -> String? {
        guard let ext = self.extensions[oid: oid] else { return nil }
        let wanted = ASN1Identifier(tagWithNumber: tagNumber, tagClass: .contextSpecific)
        return try? DER.sequence(try DER.parse(ext.value), identifier: .sequence) { nodes -> String? in
            var found: String?
            while let node = nodes.next() {
                guard node.identifier == wanted, found == nil else { continue }
                let octets = try DER.explicitlyTagged(node, tagNumber: tagNumber, tagClass: .contextSpecific) {
                    try ASN1OctetString(derEncoded: $0)
                }
                found = String(validating: octets.bytes, as: UTF8.self)
            }
            return found
        }
    }
}
