//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// The COSE signature algorithms (IANA "COSE Algorithms") the verifier implements.
public struct COSEAlgorithm: RawRepresentable, Sendable, Hashable, CustomStringConvertible, CaseIterable {
    public let rawValue: Int64

    public init(rawValue: Int64) {
        self.rawValue = rawValue
    }

    /// ECDSA over P-256 with SHA-256 (-7): platform passkeys and most security keys.
    public static let es256 = COSEAlgorithm(rawValue: -7)
    /// EdDSA (-8), with Ed25519 keys.
    public static let edDSA = COSEAlgorithm(rawValue: -8)
    /// RSASSA-PKCS1-v1_5 with SHA-256 (-257): Windows Hello.
    public static let rs256 = COSEAlgorithm(rawValue: -257)
    /// RSASSA-PSS with SHA-256 (-37).
    public static let ps256 = COSEAlgorithm(rawValue: -37)
    /// RSASSA-PSS with SHA-384 (-38).
    public static let ps384 = COSEAlgorithm(rawValue: -38)
    /// RSASSA-PKCS1-v1_5 with SHA-1 (-65535). Real Windows Hello TPMs still sign attestation
    /// statements with it; never accepted for a credential's own key unless the policy says so.
    public static let rs1 = COSEAlgorithm(rawValue: -65535)

    public static let allCases: [COSEAlgorithm] = [.es256, .edDSA, .rs256, .ps256, .ps384, .rs1]

    /// What a policy accepts for a credential's own key by default: all but RS1.
    public static let defaultCredentialAlgorithms: Set<COSEAlgorithm> = [.es256, .edDSA, .rs256, .ps256, .ps384]

    public var description: String {
        switch self {
        case .es256: "ES256"
        case .edDSA: "EdDSA"
        case .rs256: "RS256"
        case .ps256: "PS256"
        case .ps384: "PS384"
        case .rs1: "RS1"
        default: "COSE algorithm \(self.rawValue)"
        }
    }
}
