//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
import FormAttestFlows
import FormAttestForm
import FormAttestResponses
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
/// `device` chooses what the device sends beyond the iOS 14–26 format (the simulator's profile):
/// `{os: "ios26" | "ios27" | "macos27", validationCategory: name or number, bundleVersion, cdHash:
/// hex, spelling: "apple" | "documentation" | "both", assertionMap: bool, assertionFlags: 0-255}`.
/// Without it the device is the server's (iOS 14–26 unless configured otherwise).
///
/// A keyId the device does not hold is 404 `simulator_unknown_key` (``APIError/simulatorUnknownKey``). The device is
/// a ``DevelopmentDevice``: this module never links the simulator.
struct DevSimulatorController<Device: DevelopmentDevice> {
    let device: Device

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
        let answer: SimulatedResponse
        do {
            let profile = try self.device.profile(body.value["device"])
            switch body.value["action"]?.stringValue {
            case "attest":
                let (keyID, attestation) = try self.device.attestNewKey(clientDataHash: hash, profile: profile)
                answer = SimulatedResponse(keyID: keyID, clientDataHash: hash, attestationObject: attestation)
            case "assert":
                let keyID = try body.bytes("keyId")
                let assertion = try self.device.assert(keyID: keyID, clientDataHash: hash, profile: profile)
                answer = SimulatedResponse(keyID: keyID, clientDataHash: hash, assertion: assertion)
            default:
                throw APIError.invalidRequest("action must be attest or assert")
            }
        } catch let error as DevelopmentDeviceError {
            switch error {
            case .invalidRequest(let message): throw APIError.invalidRequest(message)
            case .unknownKey: throw APIError.simulatorUnknownKey
            case .failed(let message): throw APIError.simulatorError(message)
            }
        }
        return try JSONResponse.make(answer)
    }
}

extension FormAttestApplication {
    /// `POST /api/dev/simulate` on `group`, answered by `device`.
    static func addDevelopmentRoutes(_ device: some DevelopmentDevice, to group: RouterGroup<AppRequestContext>) {
        DevSimulatorController(device: device).addRoutes(to: group)
    }
}
