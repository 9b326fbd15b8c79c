//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttestSimulator
import CanonicalJSON
import FormAttestClient
import Foundation
import Hummingbird

/// `POST /api/dev/simulate`, only with `--dev-simulator`: browsers cannot call App Attest, so the
/// demo page asks this simulated device to attest a key or sign a form, then submits the result
/// to the real endpoints like any app would.
///
/// Body: `{action: "attest" | "assert", form: {...}, keyId?}`; the device signs SHA-256 of the
/// form's RFC 8785 bytes. Or `{action: "attest", poolChallenge}`: a pooled key, attested over the
/// 32-byte pool challenge itself. Answers `{keyId, attestationObject | assertion, clientDataHash}`.
struct DevSimulatorController {
    let client: AppAttestClient

    init(device: SimulatedDevice) {
        // No breaker: the demo attests as often as the visitor clicks.
        self.client = AppAttestClient(
            service: SimulatedAppAttestService(device: device),
            configuration: .init(maximumAttestationsPerWindow: .max)
        )
    }

    func addRoutes(to group: RouterGroup<AppRequestContext>) {
        group.post("simulate", use: self.simulate)
    }

    @Sendable func simulate(_ request: Request, context: AppRequestContext) async throws -> Response {
        let body = try await RequestBody.read(request, context: context)
        let hash: Data
        if let poolChallenge = try body.optionalBytes("poolChallenge") {
            hash = Data(poolChallenge)
        } else {
            do {
                hash = Data(try SignedForm(jsonBytes: try body.form()).clientDataHash)
            } catch let error as FormError {
                throw APIError(status: .badRequest, code: error.code.identifier, message: error.reason)
            }
        }
        var members: [(name: String, value: JSONValue)] = [("clientDataHash", .string(JSONString(Base64URL.encode(hash))))]
        do {
            switch body.value["action"]?.stringValue {
            case "attest":
                let registration = try await self.client.register(clientDataHash: hash)
                members += [
                    ("keyId", .string(JSONString(Base64URL.encode(Base64URL.decode(registration.keyId) ?? [])))),
                    ("attestationObject", .string(JSONString(Base64URL.encode(registration.attestation)))),
                ]
            case "assert":
                let keyID = try body.bytes("keyId")
                let assertion = try await self.client.generateAssertion(keyId: Data(keyID).base64EncodedString(), clientDataHash: hash)
                members += [("keyId", .string(JSONString(Base64URL.encode(keyID)))), ("assertion", .string(JSONString(Base64URL.encode(assertion))))]
            default:
                throw APIError.invalidRequest("action must be attest or assert")
            }
        } catch let error as AppAttestError {
            throw APIError(status: .badRequest, code: "simulator_error", message: "\(error)")
        }
        return JSONResponse.make(.object(JSONObject(constantMembers: members)))
    }
}
