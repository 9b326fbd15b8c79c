//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import AppAttest
import CanonicalJSON
import Crypto
public import FormAttestForm
public import Foundation
import RFC3339
public import WebAuthn

/// The logic a backend runs for each signed form, independent of HTTP.
///
/// Each flow parses the form with the strict RFC 8785 parser, recomputes clientDataHash, applies
/// the form policy (time window, user binding), verifies the attestation or assertion, and then
/// writes its state in one atomic store commit. Every rejection is a ``FlowError`` and changes no
/// state. Time and randomness are injected.
public struct FormFlows: Sendable {
    public let verifier: AppAttestVerifier
    public let store: any AttestationStore
    public let configuration: FlowConfiguration
    /// The passkey verifier (relying party id, origins); `nil`: the service accepts no passkeys
    /// (`passkeys_disabled`).
    public let webAuthn: WebAuthnVerifier?
    let randomBytes: @Sendable (Int) -> [UInt8]
    /// Results of ``checkKeyAttestation(_:)``, per process.
    let keyAttestationChecks = KeyAttestationChecks()

    /// A registration's last step before its commit, given by the caller of the flow
    /// (``attest(_:now:admit:)``, ``registerPooled(_:now:admit:)``,
    /// ``registerPasskey(_:now:admit:)``): an error it throws refuses the request, nothing stored.
    public typealias Admission = @Sendable () async throws(FlowError) -> Void

    public init(
        verifier: AppAttestVerifier,
        store: any AttestationStore,
        configuration: FlowConfiguration = FlowConfiguration(),
        webAuthn: WebAuthnVerifier? = nil,
        randomBytes: @escaping @Sendable (Int) -> [UInt8] = { count in
            var generator = SystemRandomNumberGenerator()
            return (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
        }
    ) {
        self.verifier = verifier
        self.store = store
        self.configuration = configuration
        self.webAuthn = webAuthn
        self.randomBytes = randomBytes
    }

    // MARK: - Requests and outcomes

    /// Register a key while signing a form (local challenge), or answering a server challenge.
    public struct AttestRequest: Sendable {
        public var username: String
        public var keyID: [UInt8]
        public var attestationObject: [UInt8]
        /// The form as the client sent it (JSON bytes).
        public var form: [UInt8]
        /// The clientDataHash the client says it attested over; checked against the form's.
        public var claimedClientDataHash: [UInt8]?
        /// The caller's session (an identity token's `sid`): the form's `session` must be it.
        public var session: String?
        /// The form already parsed from a request body (`init(body:)`); used only while its
        /// canonical bytes are still ``form``'s, so the form is parsed once.
        var preparedForm: SignedForm? = nil

        public init(
            username: String, keyID: [UInt8], attestationObject: [UInt8], form: [UInt8], claimedClientDataHash: [UInt8]? = nil, session: String? = nil
        ) {
            self.username = username
            self.keyID = keyID
            self.attestationObject = attestationObject
            self.form = form
            self.claimedClientDataHash = claimedClientDataHash
            self.session = session
        }
    }

    /// Sign a form with a registered key.
    public struct AssertRequest: Sendable {
        public var username: String
        public var keyID: [UInt8]
        public var assertion: [UInt8]
        public var form: [UInt8]
        /// The caller's session (an identity token's `sid`): the form's `session` must be it.
        public var session: String?
        /// The form already parsed from a request body (`init(body:)`); used only while its
        /// canonical bytes are still ``form``'s, so the form is parsed once.
        var preparedForm: SignedForm? = nil

        public init(username: String, keyID: [UInt8], assertion: [UInt8], form: [UInt8], session: String? = nil) {
            self.username = username
            self.keyID = keyID
            self.assertion = assertion
            self.form = form
            self.session = session
        }
    }

    /// Register a pooled key (attested earlier over a pool challenge) and sign a form with it.
    public struct PooledRequest: Sendable {
        public var username: String
        public var keyID: [UInt8]
        public var attestationObject: [UInt8]
        /// The pool challenge (32 bytes), which was the attestation's clientDataHash.
        public var poolChallenge: [UInt8]
        public var assertion: [UInt8]
        public var form: [UInt8]
        /// The caller's session (an identity token's `sid`): the form's `session` must be it.
        public var session: String?
        /// The form already parsed from a request body (`init(body:)`); used only while its
        /// canonical bytes are still ``form``'s, so the form is parsed once.
        var preparedForm: SignedForm? = nil

        public init(
            username: String, keyID: [UInt8], attestationObject: [UInt8], poolChallenge: [UInt8], assertion: [UInt8], form: [UInt8],
            session: String? = nil
        ) {
            self.username = username
            self.keyID = keyID
            self.attestationObject = attestationObject
            self.poolChallenge = poolChallenge
            self.assertion = assertion
            self.form = form
            self.session = session
        }
    }

    /// A registered key.
    public struct AttestOutcome: Sendable {
        public var attestation: VerifiedAttestation
        /// The clientDataHash the attestation was made over: the form's, or for a pooled key the
        /// pool challenge (the form is then signed by the assertion alone).
        public var attestedClientDataHash: [UInt8]
        public var form: SignedForm
        /// The stored counter: 0, or the pooled assertion's counter.
        public var counter: UInt32
        /// The user's registrations (this one included) within the configured window, 30 days by
        /// default: a fraud signal to report, never a reason to refuse. `nil` when the store
        /// could not count them (the registration itself is committed).
        public var recentRegistrations: Int? = nil
        public var nextChallenge: IssuedChallenge?
    }

    /// An accepted assertion.
    public struct AssertOutcome: Sendable {
        public var key: StoredKey
        public var assertion: VerifiedAssertion
        public var form: SignedForm
        public var nextChallenge: IssuedChallenge?
    }

    // MARK: - Challenges

    /// Issues a random 32-byte challenge.
    public func issueChallenge(purpose: ChallengePurpose, username: String?, now: Date) async throws(FlowError) -> IssuedChallenge {
        if let username { try Self.checkUsername(username) }
        let lifetime = purpose == .pool ? self.configuration.poolChallengeLifetime : self.configuration.formChallengeLifetime
        let challenge = IssuedChallenge(
            value: self.randomBytes(32),
            purpose: purpose,
            username: username,
            issuedAt: now,
            expiresAt: now.addingTimeInterval(lifetime)
        )
        do {
            try await self.store.issueChallenge(challenge)
        } catch {
            throw FlowError(error)
        }
        return challenge
    }

    // MARK: - Flows

    /// Registers a key with an attestation over a form (accepted only when App Attest alone
    /// satisfies the form's factor policy: `passkey_required` otherwise, as in ``assert(_:now:admit:)``).
    ///
    /// `admit`, when given, is called once the form was accepted and the attestation verified,
    /// right before the commit: an error it throws refuses the request, and nothing is stored (the
    /// service spends the registration's lasting budgets there, so that a request refused for
    /// what it is spends none of them).
    public func attest(_ request: AttestRequest, now: Date, admit: Admission? = nil) async throws(FlowError) -> AttestOutcome {
        try await self.rotating(username: request.username, now: now) { () async throws(FlowError) -> AttestOutcome in
            let form = try self.acceptedForm(
                request.form, prepared: request.preparedForm, username: request.username, session: request.session, now: now)
            // A registration accepts its form too: the factor policy holds here as in `assert`
            // (a form that needs a passkey is not accepted because a fresh key attested it).
            _ = try await self.requireFactors(form, appAttest: true, passkey: false, now: now)
            if let claimed = request.claimedClientDataHash, !constantTimeEquals(claimed, form.clientDataHash) {
                throw FlowError(
                    code: .clientDataHashMismatch,
                    category: .verificationFailed,
                    reason: "the claimed clientDataHash is not SHA-256 of the canonical form"
                )
            }
            let claims = try self.formChallengeClaims(form, username: request.username)
            // Whether the keyId is registered is said only after the attestation verified (the
            // commit refuses a duplicate): before, it would tell anyone who holds a keyId.
            let attestation = try await self.verifyAttestation(
                request.attestationObject, keyID: request.keyID, clientDataHash: form.clientDataHash, now: now)
            try await admit?()
            try await self.commit(
                RegistrationCommit(
                    key: Self.storedKey(
                        attestation, KeyAttestation(object: request.attestationObject, clientDataHash: form.clientDataHash),
                        username: request.username, counter: 0, formHash: form.clientDataHash, now: now
                    ),
                    replay: ReplayRecord(formHash: form.clientDataHash, expiresAt: self.configuration.replayExpiry(for: form, now: now)),
                    challenges: claims,
                    now: now,
                    maximumActiveKeys: self.configuration.maximumKeysPerUser
                )
            )
            var outcome = AttestOutcome(attestation: attestation, attestedClientDataHash: form.clientDataHash, form: form, counter: 0)
            outcome.recentRegistrations = await self.recentRegistrations(of: request.username, now: now)
            return outcome
        } attach: { outcome, challenge in
            outcome.nextChallenge = challenge
        }
    }

    /// Accepts a form signed by a registered key (an App Attest assertion alone: a form whose
    /// factor policy needs a passkey is refused with `passkey_required`; see ``confirm(_:now:)``).
    ///
    /// `admit`, when given, is called once the key was found for the request's user and the
    /// assertion's signature verified, before anything is stored (the late-counter rule
    /// included): a budget charged there is one no stranger can spend for the user, and its
    /// refusal changes no state.
    public func assert(
        _ request: AssertRequest, now: Date, admit: (@Sendable (StoredKey) async throws(FlowError) -> Void)? = nil
    ) async throws(FlowError) -> AssertOutcome {
        try await self.rotating(username: request.username, now: now) { () async throws(FlowError) -> AssertOutcome in
            let form = try self.acceptedForm(
                request.form, prepared: request.preparedForm, username: request.username, session: request.session, now: now)
            _ = try await self.requireFactors(form, appAttest: true, passkey: false, now: now)
            let claims = try self.formChallengeClaims(form, username: request.username)
            let (key, verified) = try await self.verifyKeyAssertion(
                request.assertion, keyID: request.keyID, username: request.username, form: form, now: now, admit: admit)
            // The assertion's signals, when it carries any, become the key's last ones with its counter.
            let signals = Self.signals(verified.extensions)
            try await self.commitSigned(
                AssertionCommit(
                    keyID: request.keyID,
                    counter: verified.counter,
                    replay: ReplayRecord(formHash: form.clientDataHash, expiresAt: self.configuration.replayExpiry(for: form, now: now)),
                    challenges: claims,
                    now: now,
                    signals: signals
                ),
                form: form,
                now: now
            )
            return AssertOutcome(
                key: Self.advanced(key, to: verified.counter, form: form, signals: signals, now: now), assertion: verified, form: form)
        } attach: { outcome, challenge in
            outcome.nextChallenge = challenge
        }
    }

    /// A key as stored after an accepted assertion moved it.
    static func advanced(_ key: StoredKey, to counter: UInt32, form: SignedForm, signals: KeySignals?, now: Date) -> StoredKey {
        var stored = key
        stored.counter = counter
        stored.lastUsed = now
        stored.counterFormHash = form.clientDataHash
        stored.lastSignals = signals ?? stored.lastSignals
        return stored
    }

    /// Verifies an App Attest assertion over `form` with the user's registered key: the key's
    /// state (revoked, retired, environment, age), the signature and counter, and with evidence
    /// records on, the key's registration.
    func verifyKeyAssertion(
        _ assertion: [UInt8], keyID: [UInt8], username: String, form: SignedForm, now: Date,
        admit: (@Sendable (StoredKey) async throws(FlowError) -> Void)? = nil
    ) async throws(FlowError) -> (key: StoredKey, assertion: VerifiedAssertion) {
        // An unknown keyId and another user's keyId get the same answer: who owns a key is
        // not for the caller to learn.
        guard let key = try await self.load(keyID), Array(key.username.utf8) == Array(username.utf8) else {
            throw FlowError.keyMismatch("this keyId is not registered to this user; attest a key")
        }
        if let revokedAt = key.revokedAt {
            throw FlowError(
                code: .keyRevoked, category: .keyMismatch, reason: "this key was revoked at \(RFC3339UTC.format(revokedAt)); attest a new key")
        }
        if key.reattestationRequired {
            throw FlowError.requiresReattestation(
                "this key's signed counter went backwards once (a cloned key or a restored device); attest a new key")
        }
        // The policy in force now, not the one at registration: a key attested in an
        // environment this deployment no longer accepts is refused.
        guard self.verifier.policy.environments.contains(key.environment) else {
            throw FlowError(
                code: .init(AppAttestError.Code.environmentNotAllowed),
                category: .verificationFailed,
                reason: "the key was attested in the \(key.environment.rawValue) environment, which this deployment does not accept"
            )
        }
        if let maximumAge = self.configuration.maximumKeyAge, now.timeIntervalSince(key.createdAt) > maximumAge {
            throw FlowError.requiresReattestation("the key is older than \(maximumAge) s")
        }
        let publicKey: P256.Signing.PublicKey
        do {
            publicKey = try P256.Signing.PublicKey(x963Representation: key.publicKey)
        } catch {
            throw FlowError(code: .storeCorrupt, category: .storeUnavailable, reason: "the stored key is not a P-256 point")
        }
        let verified: VerifiedAssertion
        do throws(AppAttestError) {
            verified = try self.verifier.verifyAssertion(
                assertion,
                publicKey: publicKey,
                clientDataHash: form.clientDataHash,
                previousCounter: key.counter,
                appID: key.appID
            )
        } catch  where error.code == .counterNotIncreasing {
            // The signature verified (the verifier checks it before the counter), so the
            // key's holder signed this counter; the assertion parsed to get that far.
            let signed = (try? AssertionObject(cborEncoded: assertion))?.authenticatorData.signCount ?? 0
            try await admit?(key)
            throw await self.lateCounter(signed, key: key, form: form, reason: error.reason, now: now)
        } catch {
            throw FlowError(error)
        }
        try await admit?(key)
        // With evidence records on: a key whose registration cannot support one is refused
        // before anything is committed (and after its signature verified: only its holder learns).
        try await self.checkKeyAttestation(key)
        return (key, verified)
    }

    /// Commits an accepted form's signatures (App Attest, passkey or both) with its replay record.
    func commitSigned(_ commit: AssertionCommit, form: SignedForm, now: Date) async throws(FlowError) {
        do throws(FlowError) {
            try await self.commit(commit)
        } catch  where error.code == .counterOutOfOrder {
            // Another request (on this instance or another) advanced the counter between the
            // read and the commit's compare-and-set. If it stored this very counter over
            // another form, the key signed one counter twice: either rule retires it (red team
            // r14 F3: strict kept a key tolerant retired when the clone's two forms raced).
            // Otherwise this is a race an honest app can lose (409, the key kept), as before.
            guard let keyID = commit.keyID, let current = try await self.load(keyID), current.counter == commit.counter else { throw error }
            throw await self.lateCounter(commit.counter, key: current, form: form, reason: error.reason, now: now)
        }
    }

    /// Registers a pooled key and accepts the form it signed, in one atomic commit. `admit` as in
    /// ``attest(_:now:admit:)``: once the attestation and the assertion verified.
    public func registerPooled(_ request: PooledRequest, now: Date, admit: Admission? = nil) async throws(FlowError) -> AttestOutcome {
        try await self.rotating(username: request.username, now: now) { () async throws(FlowError) -> AttestOutcome in
            let form = try self.acceptedForm(
                request.form, prepared: request.preparedForm, username: request.username, session: request.session, now: now)
            _ = try await self.requireFactors(form, appAttest: true, passkey: false, now: now)
            var claims = try self.formChallengeClaims(form, username: request.username)
            claims.append(ChallengeClaim(value: request.poolChallenge, purpose: .pool, username: request.username))
            // The main app attested the key over the pool challenge itself (32 random bytes).
            let attestation = try await self.verifyAttestation(
                request.attestationObject, keyID: request.keyID, clientDataHash: request.poolChallenge, now: now)
            let verified: VerifiedAssertion
            do throws(AppAttestError) {
                // The attested key's own app id, as for every assertion: not any app id the policy accepts.
                verified = try self.verifier.verifyAssertion(
                    request.assertion, publicKey: attestation.publicKey, clientDataHash: form.clientDataHash, previousCounter: 0,
                    appID: attestation.appID
                )
            } catch {
                throw FlowError(error)
            }
            var key = Self.storedKey(
                attestation, KeyAttestation(object: request.attestationObject, clientDataHash: request.poolChallenge),
                username: request.username, counter: verified.counter, formHash: form.clientDataHash, now: now
            )
            key.lastSignals = Self.signals(verified.extensions) ?? key.lastSignals
            try await admit?()
            try await self.commit(
                RegistrationCommit(
                    key: key,
                    replay: ReplayRecord(formHash: form.clientDataHash, expiresAt: self.configuration.replayExpiry(for: form, now: now)),
                    challenges: claims,
                    now: now,
                    maximumActiveKeys: self.configuration.maximumKeysPerUser
                )
            )
            var outcome = AttestOutcome(
                attestation: attestation, attestedClientDataHash: request.poolChallenge, form: form, counter: verified.counter)
            outcome.recentRegistrations = await self.recentRegistrations(of: request.username, now: now)
            return outcome
        } attach: { outcome, challenge in
            outcome.nextChallenge = challenge
        }
    }

    // MARK: - Steps

    /// The refusal of a validly signed assertion whose counter `signed` is not above `key`'s
    /// stored one (``CounterRule``). What the store can prove: the form that set the stored
    /// counter (``StoredKey/counterFormHash``), and whether this form was accepted before.
    /// - The same form again: `replay` (409), nothing changes.
    /// - ``CounterRule/strict``: the key is retired (428).
    /// - ``CounterRule/tolerant``: the stored counter signed again over another form than the one
    ///   that set it is one counter value signed twice, which no honest device does: the key is
    ///   retired (428). Any other late counter (lower, or the stored form unknown) is refused
    ///   with `counter_out_of_order` (409) and changes nothing.
    private func lateCounter(_ signed: UInt32, key: StoredKey, form: SignedForm, reason: String, now: Date) async -> FlowError {
        let recorded: Bool
        do throws(StoreError) {
            recorded = try await self.store.isFormHashRecorded(form.clientDataHash, now: now)
        } catch {
            return FlowError(error)
        }
        if recorded {
            return FlowError(code: .replay, category: .conflict, reason: "this form was accepted before")
        }
        let retire: Bool
        let why: String
        switch self.configuration.counterRule {
        case .strict:
            retire = true
            why = reason + "; the key must be attested again (counter rule: strict)"
        case .tolerant:
            if signed == key.counter, let stored = key.counterFormHash, !constantTimeEquals(stored, form.clientDataHash) {
                retire = true
                why = "counter \(signed) was signed over two different forms (a cloned key); the key must be attested again"
            } else {
                retire = false
                why = reason + "; a later form of this key was accepted first: sign this form again (the key is kept)"
            }
        }
        guard retire else {
            return FlowError(code: .counterOutOfOrder, category: .conflict, reason: why)
        }
        // The key is not trusted again, whatever counter it signs next.
        do throws(StoreError) {
            try await self.store.requireReattestation(keyID: key.keyID)
        } catch {
            return FlowError(error)
        }
        return FlowError.requiresReattestation(why)
    }

    /// How many keys `username` registered within the count window (a report; never a failure).
    private func recentRegistrations(of username: String, now: Date) async -> Int? {
        let since = now.addingTimeInterval(-self.configuration.registrationCountWindow)
        return try? await self.store.countKeys(username: username, .createdSince(since))
    }

    func acceptedForm(_ bytes: [UInt8], prepared: SignedForm?, username: String, session: String?, now: Date) throws(FlowError) -> SignedForm {
        try Self.checkUsername(username)
        do {
            // A form parsed with the request body stands for these bytes only while they are its own.
            let form: SignedForm
            if let prepared, prepared.canonicalBytes == bytes {
                form = prepared
            } else {
                form = try SignedForm(jsonBytes: bytes)
            }
            try self.configuration.formPolicy.validate(form, now: now, username: username, session: session)
            return form
        } catch {
            throw FlowError(error)
        }
    }

    /// The request's username must follow ``Username``'s rule (the HTTP layer checks it first;
    /// this keeps every other caller to it too).
    static func checkUsername(_ username: String) throws(FlowError) {
        if let problem = Username.problem(username) {
            throw FlowError(code: .invalidRequest, category: .malformedInput, reason: problem)
        }
    }

    func formChallengeClaims(_ form: SignedForm, username: String) throws(FlowError) -> [ChallengeClaim] {
        guard let text = form.challenge else {
            if self.configuration.requireServerChallenge {
                throw FlowError(code: .challengeRequired, category: .policy, reason: "the form must answer a server challenge")
            }
            return []
        }
        guard let value = Base64URL.decode(text) else {
            throw FlowError(code: .challengeInvalid, category: .policy, reason: "the form's challenge is not base64url")
        }
        return [ChallengeClaim(value: value, purpose: .form, username: username)]
    }

    func load(_ keyID: [UInt8]) async throws(FlowError) -> StoredKey? {
        do {
            return try await self.store.loadKey(keyID: keyID)
        } catch {
            throw FlowError(error)
        }
    }

    private func verifyAttestation(_ object: [UInt8], keyID: [UInt8], clientDataHash: [UInt8], now: Date) async throws(FlowError)
        -> VerifiedAttestation
    {
        do throws(AppAttestError) {
            return try await self.verifier.verifyAttestation(object, keyID: keyID, clientDataHash: clientDataHash, at: now)
        } catch {
            throw FlowError(error)
        }
    }

    private func commit(_ commit: RegistrationCommit) async throws(FlowError) {
        do {
            try await self.store.commitRegistration(commit)
        } catch {
            throw FlowError(error)
        }
    }

    private func commit(_ commit: AssertionCommit) async throws(FlowError) {
        do {
            try await self.store.commitAssertion(commit)
        } catch {
            throw FlowError(error)
        }
    }

    private static func storedKey(
        _ attestation: VerifiedAttestation, _ object: KeyAttestation, username: String, counter: UInt32, formHash: [UInt8], now: Date
    ) -> StoredKey {
        StoredKey(
            keyID: attestation.keyID,
            username: username,
            publicKey: Array(attestation.publicKey.x963Representation),
            counter: counter,
            appID: attestation.appID,
            environment: attestation.environment,
            receipt: attestation.receipt,
            createdAt: now,
            lastUsed: now,
            lastSignals: Self.signals(attestation.extensions),
            attestation: object,
            counterFormHash: formHash
        )
    }

    /// The signals an extension map carried, as a key keeps them; `nil` without any.
    static func signals(_ extensions: AuthenticatorExtensions?) -> KeySignals? {
        guard let extensions, extensions.hasSignals else { return nil }
        return KeySignals(
            validationCategory: extensions.validationCategory?.rawValue,
            bundleVersion: extensions.bundleVersion,
            cdHash: extensions.cdHash,
            cdHashType: extensions.cdHashType
        )
    }

    /// Runs a flow and, when challenges rotate, attaches a fresh form challenge to its outcome or
    /// its error.
    func rotating<Outcome>(
        username: String,
        now: Date,
        _ flow: () async throws(FlowError) -> Outcome,
        attach: (inout Outcome, IssuedChallenge) -> Void
    ) async throws(FlowError) -> Outcome {
        do {
            var outcome = try await flow()
            if self.configuration.rotateChallenges, let next = try? await self.issueChallenge(purpose: .form, username: username, now: now) {
                attach(&outcome, next)
            }
            return outcome
        } catch {
            var error = error
            // A spent budget changes nothing, not even a new challenge.
            if self.configuration.rotateChallenges, error.category != .storeUnavailable, error.category != .rateLimited,
                let next = try? await self.issueChallenge(purpose: .form, username: username, now: now)
            {
                error.nextChallenge = next
            }
            throw error
        }
    }
}
