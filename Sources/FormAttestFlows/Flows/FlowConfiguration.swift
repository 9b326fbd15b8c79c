//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import FormAttestForm
public import Foundation

/// How the flows behave; every value has a documented default.
public struct FlowConfiguration: Sendable, Hashable {
    /// The form's time window and required fields. Default: 300 s past, 30 s future.
    public var formPolicy: FormPolicy
    /// Lifetime of a `form` challenge. Default 120 s.
    public var formChallengeLifetime: TimeInterval
    /// Lifetime of a `pool` challenge. Default 30 days.
    public var poolChallengeLifetime: TimeInterval
    /// Require every form to answer a server challenge. Default false (local challenge allowed).
    public var requireServerChallenge: Bool
    /// Return a fresh form challenge with every answer (and error). Default false.
    public var rotateChallenges: Bool
    /// Keys older than this must be attested again (`requires_reattestation`). Default: no limit.
    public var maximumKeyAge: TimeInterval?
    /// How old a freshly exchanged receipt's creation time may be (Apple: five minutes).
    public var maximumReceiptAge: TimeInterval = 300
    /// At most this many active keys per user. A registration beyond it is accepted (Apple
    /// advises against refusing new keys: reinstalls, restored devices and new phones make them)
    /// and revokes the user's least recently used other keys, in the same commit. Default 10;
    /// `nil`: no limit.
    public var maximumKeysPerUser: Int? = 10
    /// The window over which a user's registrations are counted and reported (a fraud signal,
    /// not a block). Default 30 days.
    public var registrationCountWindow: TimeInterval = 30 * 86_400
    /// What a validly signed assertion whose counter is not above the stored one does to its key
    /// (a form accepted before is a `replay` either way). Default ``CounterRule/tolerant``.
    public var counterRule: CounterRule = .tolerant
    /// Refuse an assertion by a key whose registration cannot support a verifiable evidence
    /// record (its attestation not kept, or not verifying with a valid receipt, as
    /// `formattest evidence verify` checks it): `key_attestation_unverifiable` (428), the app
    /// attests a new key; likewise a passkey whose registration was not kept. The service sets it
    /// whenever evidence records are on. Default false.
    public var requireVerifiableKeyAttestation: Bool = false
    /// What signatures each form needs (``FactorPolicy``). Default ``FactorPolicy/appAttestOnly``:
    /// an App Attest assertion for every form, as before passkeys.
    public var factorPolicy: FactorPolicy = .appAttestOnly
    /// At most this many active passkeys per user; a registration beyond it revokes the user's
    /// least recently used others in the same commit, as for keys. Default 10; `nil`: no limit.
    public var maximumPasskeysPerUser: Int? = 10

    public init(
        formPolicy: FormPolicy = FormPolicy(),
        formChallengeLifetime: TimeInterval = 120,
        poolChallengeLifetime: TimeInterval = 30 * 86_400,
        requireServerChallenge: Bool = false,
        rotateChallenges: Bool = false,
        maximumKeyAge: TimeInterval? = nil
    ) {
        self.formPolicy = formPolicy
        self.formChallengeLifetime = formChallengeLifetime
        self.poolChallengeLifetime = poolChallengeLifetime
        self.requireServerChallenge = requireServerChallenge
        self.rotateChallenges = rotateChallenges
        self.maximumKeyAge = maximumKeyAge
    }

    /// How long a form's replay record is kept: until the form could no longer pass the window
    /// anyway (timestamp + maximum age), plus a minute for clock differences between instances.
    func replayExpiry(for form: SignedForm, now: Date) -> Date {
        max(form.timestamp.addingTimeInterval(self.formPolicy.maximumAge + 60), now.addingTimeInterval(60))
    }
}

/// What a validly signed assertion whose counter is not above the key's stored counter means.
///
/// Both rules refuse the form (no counter is ever accepted twice or backwards); they differ in
/// whether the key is retired (`requires_reattestation` for every later form, until the app
/// attests a new key).
public enum CounterRule: String, Sendable, Hashable, CaseIterable {
    /// Retire the key only on what no honest device produces: the stored counter signed again
    /// over another form than the one that set it (one counter value signed twice: two devices
    /// hold the key). A lower counter over a new form is refused with `counter_out_of_order` (409)
    /// and the key kept: two forms signed in quick succession can reach the service in the
    /// opposite order, or through two instances.
    case tolerant
    /// Retire the key on any late counter over a new form (the only rule before this setting): a
    /// reordered delivery also retires an honest key.
    case strict
}
