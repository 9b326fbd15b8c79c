//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import CanonicalJSON
import FormAttestClient
import FormAttestFlows
import FormAttestResponses
import Foundation
import Hummingbird

/// `POST /api/dev/simulate`, only with `--dev-simulator`: browsers cannot call App Attest, so the
/// demo page asks this simulated device to attest a key or sign a form, then submits the result
/// to the real endpoints like any app would.
///
/// Body: `{action: "attest" | "assert", form: {...}, keyId?, device?}`; the device signs SHA-256
/// of the form's RFC 8785 bytes. Or `{action: "attest", poolChallenge}`: a pooled key, attested
/// over the 32-byte pool challenge itself. Answers `{keyId, attestationObject | assertion,
/// clientDataHash}`.
///
/// `device` chooses what the device sends beyond the iOS 14–26 format (``SimulatedDevice/Profile``):
/// `{os: "ios26" | "ios27" | "macos27", validationCategory: name or number, bundleVersion, cdHash:
/// hex, spelling: "apple" | "documentation" | "both", assertionMap: bool, assertionFlags: 0-255}`.
/// Without it the device is the server's (iOS 14–26 unless configured otherwise).
///
/// A keyId the device does not hold is 404 `simulator_unknown_key` (``APIError/simulatorUnknownKey``).
struct DevSimulatorController {
    let service: SimulatedAppAttestService

    init(device: SimulatedDevice) {
        self.service = SimulatedAppAttestService(device: device)
    }

    func addRoutes(to group: RouterGroup<AppRequestContext>) {
        group.post("simulate", use: self.simulate)
    }

    @Sendable func simulate(_ request: Request, context: AppRequestContext) async throws -> Response {
        let body = try await RequestBody.read(request, context: context)
        let hash: [UInt8]
        if let poolChallenge = try body.optionalBytes("poolChallenge") {
            hash = poolChallenge
        } else {
            do {
                hash = try SignedForm(jsonBytes: try body.form()).clientDataHash
            } catch let error as FormError {
                // The flows' category decides the status, as on /attest and /assert.
                throw APIError(FlowError(error))
            }
        }
        let profile = try body.value["device"].map(Self.profile) ?? self.service.device.profile
        let answer: SimulatedResponse
        do {
            switch body.value["action"]?.stringValue {
            case "attest":
                let keyId = self.service.generateKey()
                let attestation = try self.service.attestKey(keyId, clientDataHash: hash, profile: profile)
                answer = SimulatedResponse(keyID: Base64URL.decode(keyId) ?? [], clientDataHash: hash, attestationObject: attestation)
            case "assert":
                let keyID = try body.bytes("keyId")
                let assertion = try self.service.generateAssertion(Data(keyID).base64EncodedString(), clientDataHash: hash, profile: profile)
                answer = SimulatedResponse(keyID: keyID, clientDataHash: hash, assertion: assertion)
            default:
                throw APIError.invalidRequest("action must be attest or assert")
            }
        } catch let error as AppAttest.AppAttestError {
            throw APIError.simulatorError("\(error)")
        } catch let error as APIError {
            throw error
        } catch let error where DCErrorCode(error) == .invalidKey {
            throw APIError.simulatorUnknownKey
        } catch {
            throw APIError.simulatorError("the simulated device refused to sign")
        }
        return try JSONResponse.make(answer)
    }

    /// Reads `device` strictly: unknown members and values of another type are refused.
    static func profile(_ value: JSONValue) throws(APIError) -> SimulatedDevice.Profile {
        guard case .object(let object) = value else { throw APIError.invalidRequest("device must be an object") }
        let known: Set<String> = ["os", "validationCategory", "bundleVersion", "cdHash", "spelling", "assertionMap", "assertionFlags"]
        if let unknown = object.members.first(where: { !known.contains($0.name.string) }) {
            throw APIError.invalidRequest("device has an unknown member \(unknown.name.string.debugDescription)")
        }
        var os = "ios27"
        if let value = object["os"] {
            guard let text = value.stringValue else { throw APIError.invalidRequest("device.os must be ios26, ios27 or macos27") }
            os = text
        }
        var profile: SimulatedDevice.Profile
        switch os {
        case "ios26": return .beforeIOS27
        case "ios27": profile = .iOS27()
        case "macos27": profile = .macOS27()
        default: throw APIError.invalidRequest("device.os must be ios26, ios27 or macos27")
        }
        var signals = profile.signals ?? SimulatedSignals()
        switch object["validationCategory"] {
        case nil: break
        case .number(let number)?:
            guard let value = UInt32(exactly: number) else { throw APIError.invalidRequest("device.validationCategory must be a UInt32 or a name") }
            signals.validationCategory = ValidationCategory(rawValue: value).littleEndianBytes
        case .string(let name)?:
            guard let category = ValidationCategory(argument: name.string) else {
                throw APIError.invalidRequest("device.validationCategory \(name.string.debugDescription) is not a category name")
            }
            signals.validationCategory = category.littleEndianBytes
        default:
            throw APIError.invalidRequest("device.validationCategory must be a number or a name")
        }
        if let version = object["bundleVersion"] {
            guard let text = version.stringValue, !text.isEmpty, text.utf8.count <= 64 else {
                throw APIError.invalidRequest("device.bundleVersion must be text of 1 to 64 bytes")
            }
            signals.bundleVersion = text
        }
        if let cdHash = object["cdHash"] {
            guard let text = cdHash.stringValue, let hash = AppAttest.bytes(hex: text), (1...64).contains(hash.count) else {
                throw APIError.invalidRequest("device.cdHash must be 2 to 128 hex digits")
            }
            signals.cdHash = hash
            signals.cdHashType = [UInt8(AuthenticatorExtensions.cdHashTypeSHA256)]
        }
        if let spelling = object["spelling"] {
            guard let text = spelling.stringValue, let chosen = SimulatedSignals.Spelling(rawValue: text) else {
                throw APIError.invalidRequest("device.spelling must be apple, documentation or both")
            }
            signals.spelling = chosen
        }
        profile.signals = signals
        if let carry = object["assertionMap"] {
            guard case .bool(let flag) = carry else { throw APIError.invalidRequest("device.assertionMap must be true or false") }
            profile.assertionsCarrySignals = flag
        }
        if let flags = object["assertionFlags"] {
            guard case .number(let number) = flags, let byte = UInt8(exactly: number) else {
                throw APIError.invalidRequest("device.assertionFlags must be 0 to 255")
            }
            profile.assertionFlags = byte
        }
        return profile
    }
}
