//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
import FormAttestFlows
import FormAttestResponses
import FormAttestTokens
import Foundation
import Hummingbird
import WebAuthn

/// `/api/passkeys/*`: a passkey's registration for the authenticated caller. Forms signed with a
/// passkey go to `POST /api/appattest/assert` with a `passkey` member (``AppAttestController``).
///
/// The caller's authentication, the storage guard and the rate limits are the App Attest
/// endpoints': options count as a `challenge`, a registration as an `attest`.
struct PasskeyController {
    let flows: FormFlows
    let rateLimiter: RateLimiter
    let storageGuard: StorageGuard?
    let now: @Sendable () -> Date

    func addRoutes(to group: RouterGroup<AppRequestContext>) {
        group.get("options", use: self.options)
        group.post("register", use: self.register)
    }

    private func checkStorage(_ context: AppRequestContext) async throws {
        guard let storageGuard = self.storageGuard else { return }
        if await storageGuard.shortage(logger: context.logger) != nil {
            throw APIError.insufficientStorage
        }
    }

    private func run<T>(_ body: () async throws(FlowError) -> T) async throws -> T {
        do {
            return try await body()
        } catch {
            throw APIError(error)
        }
    }

    /// `GET /api/passkeys/options?username=`: a passkey challenge, the user handle and the
    /// relying party id for `navigator.credentials.create()`.
    @Sendable func options(_ request: Request, context: AppRequestContext) async throws -> Response {
        let query = try QueryParameters(request)
        let requested = query.get("username")
        if let requested { try APIError.checkUsername(requested) }
        let user: String?
        do {
            user = try (context.identity ?? CallerIdentity(kind: .unauthenticated)).user(requested: requested)
        } catch {
            throw APIError(error)
        }
        guard let username = user else { throw APIError.invalidRequest("username is required: a passkey is registered for one user") }
        let now = self.now()
        try await self.checkStorage(context)
        try await self.rateLimiter.check(endpoint: "challenge", user: username, request: request, context: context, now: now)
        let options = try await self.run { () async throws(FlowError) in try await self.flows.passkeyRegistrationOptions(username: username, now: now)
        }
        return try JSONResponse.make(PasskeyOptionsResponse(options))
    }

    /// `POST /api/passkeys/register` `{username, challenge, userHandle, credential}`.
    @Sendable func register(_ request: Request, context: AppRequestContext) async throws -> Response {
        let body = try await RequestBody.read(request, context: context).acting(for: context.identity)
        let registration = try body.decode(FormFlows.PasskeyRegistrationRequest.init(body:actingUser:))
        let now = self.now()
        try await self.checkStorage(context)
        try await self.rateLimiter.check(endpoint: "attest", user: registration.username, request: request, context: context, now: now)
        let lasting = LastingCharge(self.rateLimiter, .registration, user: registration.username, context: context, now: now)
        let outcome = try await lasting.refundingOnRefusal {
            try await self.run { () async throws(FlowError) in
                try await self.flows.registerPasskey(registration, now: now, admit: lasting.spend)
            }
        }
        return try JSONResponse.make(PasskeyRegisteredResponse(outcome, formats: Self.formats(outcome, verifiedAt: now)))
    }

    /// `{fido2Wrapper}`: the registration in the FIDO2 wrapper's passkey shape.
    static func formats(_ outcome: FormFlows.PasskeyRegistrationOutcome, verifiedAt: Date) -> JSONValue? {
        // The flows keep the registration's bytes with every passkey they register.
        guard let sent = outcome.passkey.registration else { return nil }
        let registration = outcome.registration
        let wrapper = FIDO2Wrapper.make(
            passkey: FIDO2Wrapper.PasskeyRegistration(
                credentialID: outcome.passkey.credentialID, publicKey: outcome.passkey.publicKey,
                algorithm: registration.publicKey.algorithm.rawValue, aaguid: outcome.passkey.aaguid, signCount: outcome.passkey.signCount,
                transports: outcome.passkey.transports, format: outcome.passkey.format, backupEligible: outcome.passkey.backupEligible,
                backedUp: outcome.passkey.backedUp, attestationAnchored: registration.attestationAnchored,
                attestationObject: sent.attestationObject, clientDataJSON: sent.clientDataJSON,
                relyingPartyID: outcome.relyingPartyID, verifiedAt: verifiedAt
            ))
        return .object(JSONObject(constantMembers: [(TokenFormat.fido2.memberName, wrapper)]))
    }
}
