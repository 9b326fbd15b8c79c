//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestInspector
import CanonicalJSON
import Crypto
import FormAttestEvidence
import FormAttestFlows
import FormAttestForm
import FormAttestResponses
import FormAttestTokens
import Foundation
import Hummingbird
import Logging
import Metrics
import RFC3339
import WebAuthn

/// `/api/appattest/*`: the flows over HTTP.
struct AppAttestController {
    let flows: FormFlows
    let formatter: TokenFormatter
    let rateLimiter: RateLimiter
    let evidence: EvidenceRecorder?
    let clock: @Sendable () -> Date
    /// Assertions per user per window (``ServerConfiguration/assertionsPerUser``).
    var assertionsPerUser: Int? = nil
    /// The low-space guard (``ServerConfiguration/storageGuard``).
    var storageGuard: StorageGuard? = nil
    /// At most one inspection at a time in this instance.
    let inspectionGate = InspectionGate()

    init(flows: FormFlows, formatter: TokenFormatter, rateLimiter: RateLimiter, evidence: EvidenceRecorder?, now: @escaping @Sendable () -> Date) {
        self.flows = flows
        self.formatter = formatter
        self.rateLimiter = rateLimiter
        self.evidence = evidence
        self.clock = now
    }

    /// With the evidence log on, a form whose record could not be one log entry is refused
    /// before anything is stored (a record is the form and about 27 KB of attestation, receipt
    /// and assertion; an entry holds 65,535 bytes): an accepted form always gets its leaf.
    private func checkLoggable(_ form: [UInt8]) throws(APIError) {
        guard self.evidence?.log != nil, form.count > Self.maximumLoggedFormSize else { return }
        throw APIError.formTooLargeForEvidenceLog(form.count, limit: Self.maximumLoggedFormSize)
    }

    static let maximumLoggedFormSize = 24 * 1024

    /// Refuses a new form (or challenge) while the store's or the evidence's disk is low.
    private func checkStorage(_ context: AppRequestContext) async throws {
        guard let storageGuard = self.storageGuard else { return }
        if await storageGuard.shortage(logger: context.logger) != nil {
            throw APIError.insufficientStorage
        }
    }

    /// Counts an assertion against its user's window: every assertion whose key is the user's
    /// and whose signature verified, accepted or not (each costs a signature check, and an
    /// accepted one a replay record and an evidence file). Called by the flow at that point, so
    /// that no stranger spends a user's budget; for a user an identity provider's token proves or
    /// a trusted backend vouches for, before the flow and before the backend's total (r8 F1). Over
    /// the limit: 429 `rate_limited`, nothing stored.
    private func chargeAssertion(user: String, now: Date) async throws(FlowError) {
        guard let limit = self.assertionsPerUser else { return }
        let windowLength = self.rateLimiter.limits.window
        let start = Date(timeIntervalSince1970: (now.timeIntervalSince1970 / windowLength).rounded(.down) * windowLength)
        let end = start.addingTimeInterval(windowLength)
        let count: Int
        do {
            count = try await self.rateLimiter.store.countRequest(
                in: RateLimitWindow(id: RateLimiter.digest("assert", "user", user), start: start, expiresAt: end)
            )
        } catch {
            throw FlowError(code: .init(StoreError.Code.unavailable), category: .storeUnavailable, reason: error.reason)
        }
        if count > limit {
            let retryAfter = max(1, Int(end.timeIntervalSince(now).rounded(.up)))
            throw FlowError(rateLimitedFor: retryAfter, reason: "too many assertions for this user; retry in \(retryAfter) s")
        }
    }

    /// The request's time, in whole milliseconds: the precision records and tokens keep, so that
    /// a form is judged at exactly the instant its evidence record states (a form accepted at
    /// 299.9998 s of age must not read 300.0003 s in its record).
    func now() -> Date {
        RFC3339UTC.millisecondPrecision(self.clock())
    }
    /// Each endpoint's `ok` outcome counter, made once with the controller (after the metrics
    /// system's bootstrap): a handle per request would cost a registry lookup on the hot path.
    private let accepted: [String: Counter] = Dictionary(
        uniqueKeysWithValues: ["challenge", "attest", "assert", "register-pooled"].map {
            ($0, Self.outcomeCounter(endpoint: $0, code: "ok"))
        }
    )

    func addRoutes(to group: RouterGroup<AppRequestContext>) {
        group.get("challenge", use: self.challenge)
        group.post("attest", use: self.attest)
        group.post("assert", use: self.assert)
        group.post("register-pooled", use: self.registerPooled)
        group.post("inspect", use: self.inspect)
    }

    /// `formattest_flow_outcomes_total{endpoint, code}`.
    private static func outcomeCounter(endpoint: String, code: String) -> Counter {
        Counter(label: "formattest_flow_outcomes_total", dimensions: [("endpoint", endpoint), ("code", code)])
    }

    /// Runs a flow, counting its outcome and turning a `FlowError` into an ``APIError``.
    private func outcome<T>(_ endpoint: String, context: AppRequestContext, _ body: () async throws(FlowError) -> T) async throws -> T {
        do {
            // The flow: the form's policy, the verification and the store's reads and commit
            // (spans of their own under this one, from the traced store).
            let value = try await TraceStep.run("flow \(endpoint)") { () async throws(FlowError) -> T in try await body() }
            (self.accepted[endpoint] ?? Self.outcomeCounter(endpoint: endpoint, code: "ok")).increment()
            return value
        } catch {
            Self.outcomeCounter(endpoint: endpoint, code: error.code.identifier).increment()
            // The code only: never request fields, attestation bytes or keys in logs.
            context.logger.info("rejected", metadata: ["endpoint": .string(endpoint), "code": .string(error.code.identifier)])
            if error.reason != APIError.withoutSourceLocations(error.reason) {
                // A library's error with its source location: the answer leaves it out (r3 F7).
                context.logger.info("rejected: library detail", metadata: ["endpoint": .string(endpoint), "reason": .string(error.reason)])
            }
            if error.category == .storeUnavailable {
                // The answer says only store_unavailable; the operator needs the store's reason.
                context.logger.error("store unavailable", metadata: ["endpoint": .string(endpoint), "reason": .string(error.reason)])
            }
            throw APIError(error)
        }
    }

    @Sendable func challenge(_ request: Request, context: AppRequestContext) async throws -> Response {
        let query = try QueryParameters(request)
        let purposeText = query.get("purpose") ?? "form"
        guard let purpose = ChallengePurpose(rawValue: purposeText) else {
            throw APIError.invalidRequest("purpose must be form, pool or passkey")
        }
        let requested = query.get("username")
        if let requested { try APIError.checkUsername(requested) }
        let username: String?
        do {
            username = try (context.identity ?? CallerIdentity(kind: .unauthenticated)).user(requested: requested)
        } catch {
            throw APIError(error)
        }
        let now = self.now()
        try await self.checkStorage(context)
        let spent = try await self.rateLimiter.check(
            endpoint: "challenge", user: username, lasting: purpose == .pool ? .poolChallenge : .none, request: request, context: context, now: now)
        let challenge = try await self.rateLimiter.refundingOnRefusal(spent) {
            try await self.outcome("challenge", context: context) { () async throws(FlowError) in
                try await self.flows.issueChallenge(purpose: purpose, username: username, now: now)
            }
        }
        return try JSONResponse.make(ChallengeResponse(challenge))
    }

    @Sendable func attest(_ request: Request, context: AppRequestContext) async throws -> Response {
        let body = try await TraceStep.run("body read") { try await RequestBody.read(request, context: context).acting(for: context.identity) }
        var attestRequest = try body.decode(FormFlows.AttestRequest.init(body:actingUser:))
        try self.checkLoggable(attestRequest.form)
        attestRequest.session = context.identity?.sessionID
        let now = self.now()
        try await self.checkStorage(context)
        try await self.rateLimiter.check(endpoint: "attest", user: attestRequest.username, request: request, context: context, now: now)
        let lasting = LastingCharge(self.rateLimiter, .registration, user: attestRequest.username, context: context, now: now)
        let result = try await lasting.refundingOnRefusal {
            try await self.outcome("attest", context: context) { () async throws(FlowError) in
                try await self.flows.attest(attestRequest, now: now, admit: lasting.spend)
            }
        }
        return try await self.registered(
            result, attestationObject: attestRequest.attestationObject, assertion: nil, username: attestRequest.username,
            sessionBound: attestRequest.session != nil, now: now, context: context
        )
    }

    @Sendable func registerPooled(_ request: Request, context: AppRequestContext) async throws -> Response {
        let body = try await TraceStep.run("body read") { try await RequestBody.read(request, context: context).acting(for: context.identity) }
        var pooled = try body.decode(FormFlows.PooledRequest.init(body:actingUser:))
        try self.checkLoggable(pooled.form)
        pooled.session = context.identity?.sessionID
        let now = self.now()
        try await self.checkStorage(context)
        try await self.rateLimiter.check(endpoint: "register-pooled", user: pooled.username, request: request, context: context, now: now)
        let lasting = LastingCharge(self.rateLimiter, .pooledRegistration, user: pooled.username, context: context, now: now)
        let result = try await lasting.refundingOnRefusal {
            try await self.outcome("register-pooled", context: context) { () async throws(FlowError) in
                try await self.flows.registerPooled(pooled, now: now, admit: lasting.spend)
            }
        }
        return try await self.registered(
            result, attestationObject: pooled.attestationObject, assertion: pooled.assertion, username: pooled.username,
            sessionBound: pooled.session != nil, now: now, context: context
        )
    }

    /// The answer to a registration. `assertion` is the pooled key's (nil for a form signed by
    /// the attestation itself).
    private func registered(
        _ result: FormFlows.AttestOutcome, attestationObject: [UInt8], assertion: [UInt8]?, username: String, sessionBound: Bool, now: Date,
        context: AppRequestContext
    ) async throws -> Response {
        let formats = try await TraceStep.run("token signing") {
            try await self.formatter.formats(
                self.formatter.packed == nil ? [.fido2, .jws] : [.fido2, .jws, .packed],
                for: TokenFormatter.Input(
                    verified: result.attestation,
                    attestationObject: attestationObject,
                    clientDataHash: result.attestedClientDataHash,
                    formHash: result.form.clientDataHash,
                    counter: result.counter,
                    verifiedAt: now,
                    username: username
                )
            )
        }
        if let recent = result.recentRegistrations {
            // A fraud signal for the bank's own rules (never a refusal here): many new keys for
            // one user in a month.
            Recorder(label: "formattest_user_registrations_30d").record(recent)
        }
        var evidenceFields: EvidenceFields?
        if let evidence = self.evidence {
            let record = EvidenceRecord(
                kind: assertion == nil ? .attestation : .pooled,
                verifiedAt: now,
                username: username,
                form: result.form.canonicalBytes,
                keyID: result.attestation.keyID,
                appID: result.attestation.appID,
                environment: result.attestation.environment,
                counter: result.counter,
                keyAttestation: .init(object: attestationObject, clientDataHash: result.attestedClientDataHash, verifiedAt: now),
                assertion: assertion,
                policy: evidence.policy(sessionBound: sessionBound)
            )
            evidenceFields = await TraceStep.run("evidence write") { await evidence.answerFields(for: record, logger: context.logger) }
        }
        return try JSONResponse.make(
            RegisteredResponse(
                result.attestation, counter: result.counter, formHash: result.form.clientDataHash, formats: formats,
                recentRegistrations: result.recentRegistrations, evidence: evidenceFields,
                nextChallenge: result.nextChallenge.map(ChallengeResponse.init)
            )
        )
    }

    @Sendable func assert(_ request: Request, context: AppRequestContext) async throws -> Response {
        let body = try await TraceStep.run("body read") { try await RequestBody.read(request, context: context).acting(for: context.identity) }
        // A passkey assertion, with or without an App Attest one: the confirmation flow.
        if let passkey = body.value["passkey"], passkey != .null {
            return try await self.confirm(body, request: request, context: context)
        }
        var assertRequest = try body.decode(FormFlows.AssertRequest.init(body:actingUser:))
        try self.checkLoggable(assertRequest.form)
        assertRequest.session = context.identity?.sessionID
        let now = self.now()
        try await self.checkStorage(context)
        // A user vouched for (by an identity provider's token, or by a trusted backend that names
        // its logged-in user) pays at once, before the backend's total: a user over its budget
        // then spends nothing every other user of the backend needs (red team r8 F1: one
        // account's junk assertions spent the backend's total for everyone). Without caller
        // authentication the client address pays at once, and the named user only once the key's
        // signature verified, so that no stranger spends it.
        let vouchedUser = context.identity?.kind == .identityProvider || context.identity?.kind == .trustedBackend
        let user = assertRequest.username
        if vouchedUser {
            do {
                try await self.chargeAssertion(user: assertRequest.username, now: now)
            } catch {
                throw APIError(error)
            }
        }
        try await self.rateLimiter.checkCaller(endpoint: "assert", request: request, context: context, now: now)
        if self.flows.configuration.rotateChallenges {
            // Every answer then issues a challenge (errors included): it counts against the
            // challenge budget like a GET /challenge, or /assert would be an unlimited issuer.
            try await self.rateLimiter.check(endpoint: "challenge", user: assertRequest.username, request: request, context: context, now: now)
        }
        let result = try await self.outcome("assert", context: context) { () async throws(FlowError) in
            try await self.flows.assert(assertRequest, now: now) { (_: StoredKey) async throws(FlowError) in
                if !vouchedUser { try await self.chargeAssertion(user: user, now: now) }
            }
        }
        let credential = AttestedCredential(result.key, verifiedWith: result.assertion.publicKey)
        let formats = try await TraceStep.run("token signing") {
            try await self.formatter.formats(
                [.jws],
                for: TokenFormatter.Input(
                    credential: credential,
                    attestationObject: [],
                    authenticatorData: result.assertion.authenticatorData.rawValue,
                    clientDataHash: result.form.clientDataHash,
                    counter: result.assertion.counter,
                    verifiedAt: now,
                    username: assertRequest.username
                )
            )
        }
        var evidenceFields: EvidenceFields?
        if let evidence = self.evidence {
            if let attestation = result.key.attestation {
                let record = EvidenceRecord(
                    kind: .assertion,
                    verifiedAt: now,
                    username: assertRequest.username,
                    form: result.form.canonicalBytes,
                    keyID: result.key.keyID,
                    appID: result.key.appID,
                    environment: result.key.environment,
                    counter: result.assertion.counter,
                    keyAttestation: .init(object: attestation.object, clientDataHash: attestation.clientDataHash, verifiedAt: result.key.createdAt),
                    assertion: assertRequest.assertion,
                    policy: evidence.policy(sessionBound: assertRequest.session != nil)
                )
                evidenceFields = await TraceStep.run("evidence write") { await evidence.answerFields(for: record, logger: context.logger) }
            } else {
                // A key registered before its attestation was kept: the form is accepted, but no
                // record can prove the key Apple-attested.
                context.logger.warning("no evidence record: the key's attestation was not kept", metadata: ["endpoint": "assert"])
                Counter(label: "formattest_evidence_failures_total", dimensions: [("step", "key_attestation_missing")]).increment()
            }
        }
        return try JSONResponse.make(
            AssertedResponse(
                keyID: result.key.keyID, counter: result.assertion.counter, formHash: result.form.clientDataHash, formats: formats,
                extensions: result.assertion.extensions, evidence: evidenceFields, nextChallenge: result.nextChallenge.map(ChallengeResponse.init)
            )
        )
    }

    /// `POST /api/appattest/assert` with a `passkey` member: the form signed by a passkey, and by
    /// an App Attest key when `keyId` and `assertion` are there too, through the same budgets
    /// (the user's assertion budget, the storage guard, rotating challenges) and the same form
    /// policy and replay record as an App Attest assertion alone.
    private func confirm(_ body: RequestBody, request: Request, context: AppRequestContext) async throws -> Response {
        var confirmRequest = try body.decode(FormFlows.ConfirmRequest.init(body:actingUser:))
        try self.checkLoggable(confirmRequest.form)
        confirmRequest.session = context.identity?.sessionID
        let now = self.now()
        try await self.checkStorage(context)
        // The user's budget is charged before the flow here (the confirmation flow has no admit
        // step yet): without caller authentication a stranger can spend it (docs/threat-model.md).
        // A vouched user pays before the backend's total, as in `assert` (r8 F1).
        let vouchedUser = context.identity?.kind == .identityProvider || context.identity?.kind == .trustedBackend
        if !vouchedUser { try await self.rateLimiter.checkCaller(endpoint: "assert", request: request, context: context, now: now) }
        do {
            try await self.chargeAssertion(user: confirmRequest.username, now: now)
        } catch {
            throw APIError(error)
        }
        if vouchedUser { try await self.rateLimiter.checkCaller(endpoint: "assert", request: request, context: context, now: now) }
        if self.flows.configuration.rotateChallenges {
            try await self.rateLimiter.check(endpoint: "challenge", user: confirmRequest.username, request: request, context: context, now: now)
        }
        let result = try await self.outcome("assert", context: context) { () async throws(FlowError) in
            try await self.flows.confirm(confirmRequest, now: now)
        }
        var formats: JSONValue?
        if let key = result.key, let assertion = result.assertion {
            // The JWS states the App Attest key, and with `amr` and `passkey` the passkey that
            // signed the same form (a form signed by a passkey alone gets no JWS: its claims are
            // the App Attest key's).
            var input = TokenFormatter.Input(
                credential: AttestedCredential(key, verifiedWith: assertion.publicKey),
                attestationObject: [],
                authenticatorData: assertion.authenticatorData.rawValue,
                clientDataHash: result.form.clientDataHash,
                counter: assertion.counter,
                verifiedAt: now,
                username: confirmRequest.username
            )
            if let passkey = result.passkey, let verified = result.passkeyAssertion {
                input.passkey = PasskeyFactor(
                    credentialID: passkey.credentialID, userVerified: verified.userVerified, backupEligible: verified.backupEligible,
                    backedUp: verified.backedUp, signCount: verified.signCount)
            }
            formats = try await self.formatter.formats([.jws], for: input)
        }
        // The record of a form confirmed with a passkey (version 3): a passkey alone gets one too.
        var evidenceFields: EvidenceFields?
        if let evidence = self.evidence,
            let record = evidence.record(
                confirmed: result, appAttestAssertion: confirmRequest.appAttest?.assertion, passkeyPolicy: self.flows.webAuthn?.policy,
                username: confirmRequest.username, sessionBound: confirmRequest.session != nil, now: now, logger: context.logger)
        {
            evidenceFields = await TraceStep.run("evidence write") { await evidence.answerFields(for: record, logger: context.logger) }
        }
        return try JSONResponse.make(ConfirmedResponse(result, formats: formats, evidence: evidenceFields))
    }

    /// A decoded view of an attestation object, an assertion or a receipt (``Inspection``, the
    /// same code as `formattest inspect`). It shows; it never judges (no verdict).
    @Sendable func inspect(_ request: Request, context: AppRequestContext) async throws -> Response {
        let body = try await RequestBody.read(request, context: context)
        let modeName = body.value["mode"]?.stringValue ?? InspectionMode.semantic.rawValue
        guard let mode = InspectionMode(rawValue: modeName) else {
            throw APIError.invalidRequest("mode must be semantic, forensic or tree")
        }
        let present = ["attestationObject", "assertion", "receipt"].filter { body.value[$0] != nil }
        guard present.count == 1, let field = present.first else {
            throw APIError.invalidRequest("give exactly one of attestationObject, assertion, receipt")
        }
        let bytes = try body.bytes(field)
        guard bytes.count <= AppAttestLimits.maximumAttestationSize else {
            throw APIError.invalidRequest("the object is larger than 8 KiB")
        }
        let caller = self.rateLimiter.inspectionCaller(request: request, context: context)
        // The caller's budget is spent once its turn at the slot came: a refusal for a full queue,
        // a wait past its bound or a second concurrent inspection costs it nothing (r4 F4: the
        // attackers holding the queue spent the legitimate caller's budget with its refusals).
        return try await self.inspectionGate.run(caller: caller) { () async throws -> Response in
            try await self.rateLimiter.checkInspection(request: request, context: context, now: self.now())
            let inspection = Inspection(bytes, mode: mode)
            // Refused before the JSON and the text are built when the nodes alone already
            // exceed the cap (the rendering is most of the cost of an amplifying object).
            let least = inspection.minimumAnswerSize(includingText: true)
            guard least <= InspectionGate.maximumAnswerSize else {
                throw APIError.inspectionTooLarge(least, atLeast: true)
            }
            let answer = inspection.json(includingText: true).canonicalBytes
            guard answer.count <= InspectionGate.maximumAnswerSize else {
                throw APIError.inspectionTooLarge(answer.count)
            }
            return JSONResponse.make(canonicalBytes: answer)
        }
    }
}
