//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
package import AppAttestSimulator
package import CanonicalJSON
import FormAttestClient
import FormAttestForm
package import FormAttestServer
import Foundation
package import X509

/// The simulator as the service's ``DevelopmentDevice`` (`POST /api/dev/simulate`, `serve
/// --dev-simulator`): the developer executable wires it in; the HTTP module never links it.
///
/// `device` in a request chooses what the device sends beyond the iOS 14–26 format
/// (``SimulatedDevice/Profile``): `{os: "ios26" | "ios27" | "macos27", validationCategory: name
/// or number, bundleVersion, cdHash: hex, spelling: "apple" | "documentation" | "both",
/// assertionMap: bool, assertionFlags: 0-255}`. Without it the device is the server's.
package struct SimulatedDevelopmentDevice: DevelopmentDevice {
    /// The App Attest service the simulated device answers as.
    package let service: SimulatedAppAttestService

    /// - Parameter device: the simulated device (its keys live in memory).
    package init(device: SimulatedDevice) {
        self.service = SimulatedAppAttestService(device: device)
    }

    /// A device of the simulator's authority for `appID` in the development environment, with a
    /// random seed, and the two roots a verifier must add to its anchors to accept what it signs.
    ///
    /// - Warning: Whoever runs a service that trusts these roots accepts attestations anyone can
    ///   mint: development and tests only.
    package static func make(appID: String) throws -> (device: SimulatedDevelopmentDevice, trustAnchor: Certificate, receiptTrustAnchor: Certificate)
    {
        let authority = try SimulatedAttestationAuthority()
        let device = SimulatedDevice(authority: authority, appID: appID, environment: .development, seed: UInt64.random(in: 1...UInt64.max))
        return (SimulatedDevelopmentDevice(device: device), authority.rootCertificate, authority.receiptAuthority.rootCertificate)
    }

    package func attestNewKey(clientDataHash: [UInt8], profile: SimulatedDevice.Profile) throws(DevelopmentDeviceError) -> (
        keyID: [UInt8], attestationObject: [UInt8]
    ) {
        do {
            let keyId = self.service.generateKey()
            let attestation = try self.service.attestKey(keyId, clientDataHash: clientDataHash, profile: profile)
            return (Base64URL.decode(keyId) ?? [], attestation)
        } catch {
            throw Self.failure(error)
        }
    }

    package func assert(keyID: [UInt8], clientDataHash: [UInt8], profile: SimulatedDevice.Profile) throws(DevelopmentDeviceError) -> [UInt8] {
        do {
            return try self.service.generateAssertion(Data(keyID).base64EncodedString(), clientDataHash: clientDataHash, profile: profile)
        } catch {
            throw Self.failure(error)
        }
    }

    /// A verifier's error says what the device could not make; DeviceCheck's `invalidKey` is a
    /// key the device does not hold (a restart forgets every key).
    static func failure(_ error: any Error) -> DevelopmentDeviceError {
        if let error = error as? AppAttestError { return .failed("\(error)") }
        if DCErrorCode(error) == .invalidKey { return .unknownKey }
        return .failed("the simulated device refused to sign")
    }

    /// Reads `device` strictly: unknown members and values of another type are refused.
    package func profile(_ request: JSONValue?) throws(DevelopmentDeviceError) -> SimulatedDevice.Profile {
        guard let value = request else { return self.service.device.profile }
        guard case .object(let object) = value else { throw .invalidRequest("device must be an object") }
        let known: Set<String> = ["os", "validationCategory", "bundleVersion", "cdHash", "spelling", "assertionMap", "assertionFlags"]
        if let unknown = object.members.first(where: { !known.contains($0.name.string) }) {
            throw .invalidRequest("device has an unknown member \(unknown.name.string.debugDescription)")
        }
        var os = "ios27"
        if let value = object["os"] {
            guard let text = value.stringValue else { throw .invalidRequest("device.os must be ios26, ios27 or macos27") }
            os = text
        }
        var profile: SimulatedDevice.Profile
        switch os {
        case "ios26": return .beforeIOS27
        case "ios27": profile = .iOS27()
        case "macos27": profile = .macOS27()
        default: throw .invalidRequest("device.os must be ios26, ios27 or macos27")
        }
        var signals = profile.signals ?? SimulatedSignals()
        switch object["validationCategory"] {
        case nil: break
        case .number(let number)?:
            guard let value = UInt32(exactly: number) else { throw .invalidRequest("device.validationCategory must be a UInt32 or a name") }
            signals.validationCategory = ValidationCategory(rawValue: value).littleEndianBytes
        case .string(let name)?:
            guard let category = ValidationCategory(argument: name.string) else {
                throw .invalidRequest("device.validationCategory \(name.string.debugDescription) is not a category name")
            }
            signals.validationCategory = category.littleEndianBytes
        default:
            throw .invalidRequest("device.validationCategory must be a number or a name")
        }
        if let version = object["bundleVersion"] {
            guard let text = version.stringValue, !text.isEmpty, text.utf8.count <= 64 else {
                throw .invalidRequest("device.bundleVersion must be text of 1 to 64 bytes")
            }
            signals.bundleVersion = text
        }
        if let cdHash = object["cdHash"] {
            guard let text = cdHash.stringValue, let hash = AppAttest.bytes(hex: text), (1...64).contains(hash.count) else {
                throw .invalidRequest("device.cdHash must be 2 to 128 hex digits")
            }
            signals.cdHash = hash
            signals.cdHashType = [UInt8(AuthenticatorExtensions.cdHashTypeSHA256)]
        }
        if let spelling = object["spelling"] {
            guard let text = spelling.stringValue, let chosen = SimulatedSignals.Spelling(rawValue: text) else {
                throw .invalidRequest("device.spelling must be apple, documentation or both")
            }
            signals.spelling = chosen
        }
        profile.signals = signals
        if let carry = object["assertionMap"] {
            guard case .bool(let flag) = carry else { throw .invalidRequest("device.assertionMap must be true or false") }
            profile.assertionsCarrySignals = flag
        }
        if let flags = object["assertionFlags"] {
            guard case .number(let number) = flags, let byte = UInt8(exactly: number) else {
                throw .invalidRequest("device.assertionFlags must be 0 to 255")
            }
            profile.assertionFlags = byte
        }
        return profile
    }
}
