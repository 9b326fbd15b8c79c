//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// Apple's App Attest environment, named by the aaguid in the attestation.
public enum AppAttestEnvironment: String, Sendable, Hashable, CaseIterable, Codable {
    /// aaguid `appattestdevelop`: builds with the development entitlement.
    case development
    /// aaguid `appattest` followed by seven zero bytes: App Store, TestFlight and enterprise builds.
    case production

    /// The 16-byte aaguid of this environment.
    public var aaguid: [UInt8] {
        switch self {
        case .development: return Array("appattestdevelop".utf8)
        case .production: return Array("appattest".utf8) + [UInt8](repeating: 0, count: 7)
        }
    }

    /// The environment an aaguid names, or `nil` for any other aaguid.
    public init?(aaguid: some Collection<UInt8>) {
        let bytes = Array(aaguid)
        guard let match = Self.allCases.first(where: { $0.aaguid == bytes }) else { return nil }
        self = match
    }
}
