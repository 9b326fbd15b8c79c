//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import CanonicalJSON

/// The software device behind `POST /api/dev/simulate` (`--dev-simulator`): browsers cannot call
/// App Attest, so the demo page asks it to attest a key or sign a form.
///
/// The HTTP module knows only this protocol: the simulator (a CA that mints attestations the
/// service then accepts) is implemented in `FormAttestDevSimulator` and wired in by the developer
/// executable alone, so a production binary never contains it.
public protocol DevelopmentDevice: Sendable {
    /// What the request's `device` member chose (the device's own when it is absent).
    associatedtype Profile: Sendable

    /// Reads the request's `device` member strictly (`nil` when absent).
    /// - Throws: ``DevelopmentDeviceError/invalidRequest(_:)`` naming the bad member.
    func profile(_ request: JSONValue?) throws(DevelopmentDeviceError) -> Profile

    /// Generates a key and attests it over `clientDataHash`.
    func attestNewKey(clientDataHash: [UInt8], profile: Profile) throws(DevelopmentDeviceError) -> (keyID: [UInt8], attestationObject: [UInt8])

    /// Signs `clientDataHash` with the key `keyID`, which the device must hold.
    func assert(keyID: [UInt8], clientDataHash: [UInt8], profile: Profile) throws(DevelopmentDeviceError) -> [UInt8]
}

/// Why a ``DevelopmentDevice`` did not answer; the route decides the HTTP status of each.
public enum DevelopmentDeviceError: Error, Sendable {
    /// The request asked for something the device cannot be (400 `invalid_request`).
    case invalidRequest(String)
    /// The device holds no key with this id (404 `simulator_unknown_key`).
    case unknownKey
    /// The device could not produce the request (400 `simulator_error`).
    case failed(String)
}
