//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
import FormAttestForm
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
/// A keyId the device does not hold is 404 `simulator_unknown_key` (``unknownKey``). The device is
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
                throw APIError(status: .badRequest, code: error.code.identifier, message: error.reason)
            }
        }
        var members: [(name: String, value: JSONValue)] = [("clientDataHash", .string(JSONString(Base64URL.encode(hash))))]
        do {
            let profile = try self.device.profile(body.value["device"])
            switch body.value["action"]?.stringValue {
            case "attest":
                let (keyID, attestation) = try self.device.attestNewKey(clientDataHash: hash, profile: profile)
                members += [
                    ("keyId", .string(JSONString(Base64URL.encode(keyID)))),
                    ("attestationObject", .string(JSONString(Base64URL.encode(attestation)))),
                ]
            case "assert":
                let keyID = try body.bytes("keyId")
                let assertion = try self.device.assert(keyID: keyID, clientDataHash: hash, profile: profile)
                members += [("keyId", .string(JSONString(Base64URL.encode(keyID)))), ("assertion", .string(JSONString(Base64URL.encode(assertion))))]
            default:
                throw APIError.invalidRequest("action must be attest or assert")
            }
        } catch let error as DevelopmentDeviceError {
            switch error {
            case .invalidRequest(let message): throw APIError.invalidRequest(message)
            case .unknownKey: throw DevSimulatorControllerErrors.unknownKey
            case .failed(let message): throw APIError(status: .badRequest, code: "simulator_error", message: message)
            }
        }
        return JSONResponse.make(.object(JSONObject(constantMembers: members)))
    }
}

extension FormAttestApplication {
    /// `POST /api/dev/simulate` on `group`, answered by `device`.
    static func addDevelopmentRoutes(_ device: some DevelopmentDevice, to group: RouterGroup<AppRequestContext>) {
        DevSimulatorController(device: device).addRoutes(to: group)
    }
}

/// The dev simulator route's own answers (a generic type cannot hold static stored properties).
enum DevSimulatorControllerErrors {
    /// The answer for a keyId the simulated device does not hold (DeviceCheck's `invalidKey`):
    /// its keys live in memory, so after a server restart every key a page remembers is unknown,
    /// and the page must attest a new one.
    static let unknownKey = APIError(
        status: .notFound,
        code: "simulator_unknown_key",
        message: "the simulated device holds no key with this keyId (it keeps its keys in memory, so a server restart forgets them): attest a new key"
    )
}
