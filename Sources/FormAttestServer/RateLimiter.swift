//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Crypto
import FormAttestFlows
public import Foundation
import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers
import NIOCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Rate limits on the endpoints that spend the service's resources (challenge, attest,
/// register-pooled, assert with rotating challenges, inspect): fixed windows counted in the
/// store, so that every instance sharing it shares the limits. Over a limit: 429 `rate_limited`
/// with `Retry-After`.
///
/// Whom a request is counted against depends on who vouches for it, so that no caller escapes a
/// budget and none spends another's:
/// - an identity provider's token: the token's user alone (the address is not one client's: a
///   carrier NAT, a company proxy or a bank's own front end carries many users);
/// - a trusted backend: the backend (every request of its secret, `perBackend`), and the user
///   it names, or, for a request that names none (pool challenges, the inspector), the backend's
///   budget for such requests (`perBackendUnnamed`);
/// - no caller authentication: the client address, and the username the request names.
///
/// Pool challenges (`purpose=pool`, kept 30 days) and `register-pooled` also spend a trusted
/// backend's pool budget (`pool`), whether or not they name a user: a backend naming a fresh
/// user on each request would otherwise spend only its total (r3 F4).
///
/// What a request leaves behind for long is budgeted over as long (red team r5):
/// - a pool challenge also spends its user's `poolPerUser`, counted over the pool challenges'
///   lifetime (`poolPerUserWindow`), so that no one user, whoever vouches for it, holds more
///   than twice that many at once (two consecutive windows);
/// - a registration (an App Attest key, a pooled key or a passkey, each kept with its
///   registration) spends its user's `registrationsPerUser` over a day, whoever asks, and by a
///   trusted backend also the backend's `registrationsPerBackend`, whatever user it names: a
///   backend naming a fresh user each time (software passkeys need no device) would otherwise
///   fill the store at its total's rate.
///
/// Those two backend budgets bound what is stored, so no caller may spend them for another
/// (red team r7 F5, F6):
/// - only a request that stores something spends them: a refused one (any 4xx) gives back what
///   it spent (`RateLimiter.refund(_:)`), so junk costs only its sender's own budgets;
/// - one user the backend names may spend at most `backendUserSharePercent` of each in a
///   window, so that a few hostile accounts with valid registrations cannot spend them for
///   every other user of the backend.
///
/// A client address is an IPv4 address (/32; an IPv4-mapped IPv6 address is read as its IPv4
/// address) or an IPv6 prefix (`ipv6Prefix` bits, /64 by default: one subscriber's allocation).
public struct RateLimits: Sendable, Hashable {
    /// Requests per window per user, per endpoint.
    public var perUser: Int
    /// Requests per window per client address, per endpoint (without caller authentication).
    public var perAddress: Int
    /// The window, in seconds.
    public var window: TimeInterval
    /// How many reverse proxies in front of the service append to `X-Forwarded-For`: the client
    /// address is the entry the outermost of them added. 0: the connection's peer, and
    /// `X-Forwarded-For` is ignored (a client could write anything there).
    public var trustedProxyHops: Int
    /// Requests per window per backend secret, per endpoint, whatever user they name.
    public var perBackend: Int
    /// Requests per window per backend secret that name no user, per endpoint.
    public var perBackendUnnamed: Int
    /// The bits of an IPv6 address that name one client (32-128).
    public var ipv6Prefix: Int
    /// `POST /api/appattest/inspect` requests per window per caller (user, backend or address).
    public var inspect: Int
    /// Pool challenges and `register-pooled` requests together per window per backend secret,
    /// whatever user they name.
    public var pool: Int
    /// Pool challenges per user per ``poolPerUserWindow``, whoever asks for them.
    public var poolPerUser: Int
    /// The window of ``poolPerUser``, in seconds: the pool challenges' lifetime (30 days).
    public var poolPerUserWindow: TimeInterval
    /// Registrations (attest, register-pooled, passkey register) per window per backend secret,
    /// whatever user they name.
    public var registrationsPerBackend: Int
    /// The percent of ``pool`` and ``registrationsPerBackend`` one user a backend names may
    /// spend in a window (1-100; at least one request each).
    public var backendUserSharePercent: Int
    /// Registrations (App Attest keys, pooled keys, passkeys) per user per
    /// ``registrationsPerUserWindow``, whoever asks.
    public var registrationsPerUser: Int
    /// The window of ``registrationsPerUser``, in seconds (a day).
    public var registrationsPerUserWindow: TimeInterval

    /// Defaults: 30 a minute per user and per address, 3000 per backend (30 naming no user),
    /// IPv6 by /64, 60 inspections, 60 pool requests per backend, 100 pool challenges per user in
    /// 30 days, 600 registrations a minute per backend, a tenth of those two for one user, 20
    /// registrations per user a day, no proxy.
    public init(
        perUser: Int = 30, perAddress: Int = 30, window: TimeInterval = 60, trustedProxyHops: Int = 0, perBackend: Int = 3000,
        perBackendUnnamed: Int = 30, ipv6Prefix: Int = 64, inspect: Int = 60, pool: Int = 60, poolPerUser: Int = 100,
        poolPerUserWindow: TimeInterval = 30 * 86_400, registrationsPerBackend: Int = 600, backendUserSharePercent: Int = 10,
        registrationsPerUser: Int = 20, registrationsPerUserWindow: TimeInterval = 86_400
    ) {
        self.registrationsPerUser = registrationsPerUser
        self.registrationsPerUserWindow = registrationsPerUserWindow
        self.backendUserSharePercent = min(max(backendUserSharePercent, 1), 100)
        self.pool = pool
        self.poolPerUser = poolPerUser
        self.poolPerUserWindow = poolPerUserWindow
        self.registrationsPerBackend = registrationsPerBackend
        self.perUser = perUser
        self.perAddress = perAddress
        self.window = window
        self.trustedProxyHops = trustedProxyHops
        self.perBackend = perBackend
        self.perBackendUnnamed = perBackendUnnamed
        self.ipv6Prefix = min(max(ipv6Prefix, 32), 128)
        self.inspect = inspect
    }
}

struct RateLimiter: Sendable {
    let limits: RateLimits
    let store: any OperationalAttestationStore

    /// What one request is counted against: a kind (`user`, `address`, `backend`,
    /// `backend-unnamed`, `inspect-*`), the subject, and its limit.
    typealias Subject = (kind: String, subject: String, limit: Int)

    /// What a request leaves in the store for long, beyond its endpoint's budgets.
    enum Lasting {
        /// Nothing beyond the request's own rows.
        case none
        /// A pool challenge (kept 30 days).
        case poolChallenge
        /// A pooled key's registration (it consumes a pool challenge).
        case pooledRegistration
        /// An App Attest key's or a passkey's registration.
        case registration
    }

    /// What a request spent of the budgets that bound what is stored: given back
    /// (``refund(_:)``) when the request stores nothing.
    struct Spent: Sendable {
        fileprivate(set) var windows: [RateLimitWindow] = []
    }

    /// Counts this request against its endpoint's budgets, and against `lasting`'s (``lastingBudgets(_:user:context:)``);
    /// throws 429 when one is over its limit (503 when the store cannot count: fail closed). The
    /// endpoint's budgets keep every request they counted; the lasting ones are returned, to be
    /// given back if the request is refused (``refundingOnRefusal(_:_:)``), and are given back at
    /// once when this throws. Only for what has no check left after it (a pool challenge): a
    /// registration spends its lasting budgets at the flow's admit step (``LastingCharge``).
    @discardableResult
    func check(endpoint: String, user: String?, lasting: Lasting = .none, request: Request, context: AppRequestContext, now: Date) async throws
        -> Spent
    {
        try await self.count(endpoint: endpoint, self.subjects(user: user, request: request, context: context), now: now)
        do {
            return try await self.spend(self.lastingBudgets(lasting, user: user, context: context), now: now)
        } catch {
            throw APIError(error)
        }
    }

    /// One budget of what is stored for long: the endpoint it is counted under, whom, and its
    /// window's length (`nil`: the service's window).
    struct LastingBudget: Sendable {
        let endpoint: String
        let kind: String
        let subject: String
        let limit: Int
        let window: TimeInterval?
    }

    /// The budgets `lasting` spends for a request naming `user`, in the order they are counted:
    /// the user's own before the backend's, so that a user over its own budget spends nothing of
    /// what every user of the backend needs.
    func lastingBudgets(_ lasting: Lasting, user: String?, context: AppRequestContext) -> [LastingBudget] {
        let backend = context.identity?.kind == .trustedBackend ? context.identity?.backend ?? "" : nil
        var budgets: [LastingBudget] = []
        func backendBudget(_ endpoint: String, _ kind: String, _ limit: Int) {
            guard let backend else { return }
            budgets.append(LastingBudget(endpoint: endpoint, kind: "backend-" + kind, subject: backend, limit: limit, window: nil))
            // The named user's share of it: the backend and the user, both in the subject.
            if let user {
                let share = max(1, limit * self.limits.backendUserSharePercent / 100)
                budgets.append(
                    LastingBudget(endpoint: endpoint, kind: "backend-\(kind)-user", subject: backend + "\u{0}" + user, limit: share, window: nil))
            }
        }
        switch lasting {
        case .none:
            break
        case .poolChallenge:
            // The backend's pool budget (shared with register-pooled), and the user's over the
            // challenges' lifetime.
            backendBudget("pool", "pool", self.limits.pool)
            if let user {
                budgets.append(
                    LastingBudget(
                        endpoint: "pool", kind: "user-pool", subject: user, limit: self.limits.poolPerUser, window: self.limits.poolPerUserWindow))
            }
        case .pooledRegistration, .registration:
            // The user's registrations over a day first, whoever asks (r8 F2: 20 accounts
            // registering 30 valid software passkeys a minute each spent a backend's registration
            // budget every minute; at 20 a day each, that takes 30 fresh accounts a minute).
            if let user {
                budgets.append(
                    LastingBudget(
                        endpoint: "registration", kind: "user-registrations", subject: user, limit: self.limits.registrationsPerUser,
                        window: self.limits.registrationsPerUserWindow))
            }
            if lasting == .pooledRegistration { backendBudget("pool", "pool", self.limits.pool) }
            backendBudget("registration", "registrations", self.limits.registrationsPerBackend)
        }
        return budgets
    }

    /// Counts one request against each of `budgets`, in order; over one, what was counted is given
    /// back and 429 is thrown.
    func spend(_ budgets: [LastingBudget], now: Date) async throws(FlowError) -> Spent {
        var spent = Spent()
        do throws(FlowError) {
            for budget in budgets {
                try await self.tally(
                    endpoint: budget.endpoint, [(budget.kind, budget.subject, budget.limit)], window: budget.window, now: now
                ) { spent.windows.append($0) }
            }
        } catch {
            // Refused here: nothing will be stored, so none of it stays spent.
            await self.refund(spent)
            throw error
        }
        return spent
    }

    /// Gives back what a refused request spent of the lasting budgets. A refund the store cannot
    /// make leaves the budget spent: fail closed (the window ends on its own).
    func refund(_ spent: Spent) async {
        for window in spent.windows { try? await self.store.refundRequest(in: window) }
    }

    /// Runs a request's flow after ``check(endpoint:user:lasting:request:context:now:)``: when the
    /// flow refuses the request (a 4xx: nothing stored), what it spent of the lasting budgets is
    /// given back. A 5xx keeps it spent (the store may have committed).
    func refundingOnRefusal<T>(_ spent: Spent, _ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch {
            if spent.windows.isEmpty == false, let refused = error as? APIError, (400..<500).contains(refused.status.code) {
                await self.refund(spent)
            }
            throw error
        }
    }

    /// Counts an inspection against its caller: the token's user, the backend, or the address
    /// (`inspect`); a backend's also against its total (`perBackend`) and its budget for
    /// requests that name no user (`perBackendUnnamed`), as every request of a backend is.
    func checkInspection(request: Request, context: AppRequestContext, now: Date) async throws {
        var subjects: [Subject]
        switch context.identity?.kind {
        case .identityProvider?:
            subjects = [("inspect-user", context.identity?.username ?? "", self.limits.inspect)]
        case .trustedBackend?:
            let backend = context.identity?.backend ?? ""
            subjects = [
                ("backend", backend, self.limits.perBackend), ("backend-unnamed", backend, self.limits.perBackendUnnamed),
                ("inspect-backend", backend, self.limits.inspect),
            ]
        case .unauthenticated?, nil:
            subjects = [("inspect-address", self.clientAddress(request, context), self.limits.inspect)]
        }
        try await self.count(endpoint: "inspect", subjects, now: now)
    }

    /// Who an inspection is for, as the inspector's slot takes turns (``InspectionGate``): the
    /// token's user, the backend, or, without caller authentication, the client address (IPv6
    /// by prefix): the same caller whose `rate-limit-inspect` budget the request spends.
    func inspectionCaller(request: Request, context: AppRequestContext) -> String {
        switch context.identity?.kind {
        case .identityProvider?: "user:" + (context.identity?.username ?? "")
        case .trustedBackend?: "backend:" + (context.identity?.backend ?? "")
        case .unauthenticated?, nil: "address:" + self.clientAddress(request, context)
        }
    }

    /// Counts a request against the budgets of whoever vouches for it, before anything about
    /// the user it names is known: the backend's total (`perBackend`), or, without caller
    /// authentication, the client address (`perAddress`). An identity provider's token is
    /// counted against its user by the endpoint itself. (`/assert`: the named user's budget is
    /// spent before this when a token or a backend vouches for the user, else only once the key's
    /// signature verified, so that no stranger spends it.)
    func checkCaller(endpoint: String, request: Request, context: AppRequestContext, now: Date) async throws {
        switch context.identity?.kind {
        case .identityProvider?:
            return
        case .trustedBackend?:
            try await self.count(endpoint: endpoint, [("backend", context.identity?.backend ?? "", self.limits.perBackend)], now: now)
        case .unauthenticated?, nil:
            try await self.count(endpoint: endpoint, [("address", self.clientAddress(request, context), self.limits.perAddress)], now: now)
        }
    }

    /// The budgets a request spends (see ``RateLimits``).
    func subjects(user: String?, request: Request, context: AppRequestContext) -> [Subject] {
        switch context.identity?.kind {
        case .identityProvider?:
            // The token names the user: its budget alone, never one shared by its address.
            return [("user", context.identity?.username ?? user ?? "", self.limits.perUser)]
        case .trustedBackend?:
            // The user it names (or its budget for requests naming none) first: a request over
            // that smaller budget is refused before it spends the backend's total, which every
            // user of the backend needs (red team r8 F1).
            let backend = context.identity?.backend ?? ""
            let own: Subject = user.map { ("user", $0, self.limits.perUser) } ?? ("backend-unnamed", backend, self.limits.perBackendUnnamed)
            return [own, ("backend", backend, self.limits.perBackend)]
        case .unauthenticated?, nil:
            var subjects: [Subject] = [("address", self.clientAddress(request, context), self.limits.perAddress)]
            if let user { subjects.append(("user", user, self.limits.perUser)) }
            return subjects
        }
    }

    /// Counts one request in each subject's window (``tally(endpoint:_:window:now:counted:)``),
    /// as the answer's error.
    private func count(endpoint: String, _ subjects: [Subject], now: Date) async throws {
        do {
            try await self.tally(endpoint: endpoint, subjects, now: now)
        } catch {
            throw APIError(error)
        }
    }

    /// Counts one request in each subject's window; `counted` sees each window once the store
    /// has counted it (before a 429 for it is thrown).
    private func tally(
        endpoint: String, _ subjects: [Subject], window length: TimeInterval? = nil, now: Date, counted: (RateLimitWindow) -> Void = { _ in }
    ) async throws(FlowError) {
        let length = length ?? self.limits.window
        let start = Date(timeIntervalSince1970: (now.timeIntervalSince1970 / length).rounded(.down) * length)
        let end = start.addingTimeInterval(length)
        for (kind, subject, limit) in subjects {
            let window = RateLimitWindow(id: Self.digest(endpoint, kind, subject), start: start, expiresAt: end)
            let count: Int
            do {
                count = try await self.store.countRequest(in: window)
            } catch {
                throw FlowError(code: .init(StoreError.Code.unavailable), category: .storeUnavailable, reason: error.reason)
            }
            counted(window)
            if count > limit {
                let retryAfter = max(1, Int(end.timeIntervalSince(now).rounded(.up)))
                throw FlowError(rateLimitedFor: retryAfter, reason: "too many \(endpoint) requests for this \(kind); retry in \(retryAfter) s")
            }
        }
    }

    /// The client's address as counted (``ClientAddress``): the connection's peer, or with
    /// trusted proxies the entry of `X-Forwarded-For` the outermost trusted proxy added.
    /// Anything unparsable counts as the peer (the proxy), which limits more, never less.
    func clientAddress(_ request: Request, _ context: AppRequestContext) -> String {
        let peer = context.remoteAddress.flatMap { ClientAddress.key($0, ipv6Prefix: self.limits.ipv6Prefix) } ?? "unknown"
        let hops = self.limits.trustedProxyHops
        guard hops > 0 else { return peer }
        let entries = request.headers[values: .xForwardedFor].flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }
        guard entries.count >= hops else { return peer }
        let candidate = entries[entries.count - hops]
        return ClientAddress.key(candidate, ipv6Prefix: self.limits.ipv6Prefix) ?? peer
    }

    /// 32 bytes naming what is counted; no username is stored in the clear.
    static func digest(_ endpoint: String, _ kind: String, _ subject: String) -> [UInt8] {
        var hasher = SHA256()
        for part in ["formattest-rate-limit", endpoint, kind, subject] {
            hasher.update(data: Array(part.utf8) + [0])
        }
        return Array(hasher.finalize())
    }
}

/// The budget key of a client address: `v4:a.b.c.d` for IPv4 and IPv4-mapped IPv6
/// (`::ffff:a.b.c.d`), `v6:HEX/N` for an IPv6 address cut to its first `N` bits.
enum ClientAddress {
    static func key(_ address: SocketAddress, ipv6Prefix: Int) -> String? {
        address.ipAddress.flatMap { Self.key($0, ipv6Prefix: ipv6Prefix) }
    }

    /// The key of an address in text (`a.b.c.d` or IPv6), or nil when it is not one.
    static func key(_ text: String, ipv6Prefix: Int) -> String? {
        var v4 = [UInt8](repeating: 0, count: 4)
        if inet_pton(AF_INET, text, &v4) == 1 { return Self.v4(v4) }
        var v6 = [UInt8](repeating: 0, count: 16)
        if inet_pton(AF_INET6, text, &v6) == 1 { return Self.v6(v6, prefix: ipv6Prefix) }
        return nil
    }

    /// The key of 16 bytes of an IPv6 address: IPv4-mapped ones as IPv4, the others cut to `prefix` bits.
    static func v6(_ bytes: [UInt8], prefix: Int) -> String? {
        guard bytes.count == 16 else { return nil }
        if bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xFF && bytes[11] == 0xFF {
            return Self.v4(Array(bytes[12..<16]))
        }
        let prefix = min(max(prefix, 0), 128)
        var cut = bytes
        for index in 0..<16 {
            let kept = min(max(prefix - index * 8, 0), 8)
            cut[index] &= kept == 8 ? 0xFF : ~(0xFF >> UInt8(kept))
        }
        return "v6:" + cut.map { String($0, radix: 16) }.joined(separator: ".") + "/\(prefix)"
    }

    static func v4(_ bytes: [UInt8]) -> String? {
        guard bytes.count == 4 else { return nil }
        return "v4:" + bytes.map(String.init).joined(separator: ".")
    }
}

extension HTTPField.Name {
    static let xForwardedFor = HTTPField.Name("X-Forwarded-For")!
}

/// A registration's lasting budgets (its user's registrations over a day; through a backend, the
/// backend's registration budget, for a pooled key its pool budget, and the user's share of each),
/// spent at the flow's admit step: once the request's checks passed and its attestation verified,
/// right before the store commits it. A commit the store refuses gives them back.
///
/// Spent before the flow, as they were, a refused registration cost up to ten store writes (the
/// budgets counted, then given back; red team r8 F3); now a request the flow refuses costs only its
/// endpoint's budgets.
final class LastingCharge: Sendable {
    private let limiter: RateLimiter
    private let budgets: [RateLimiter.LastingBudget]
    private let now: Date
    private let spent = NIOLockedValueBox(RateLimiter.Spent())

    init(_ limiter: RateLimiter, _ lasting: RateLimiter.Lasting, user: String, context: AppRequestContext, now: Date) {
        self.limiter = limiter
        self.budgets = limiter.lastingBudgets(lasting, user: user, context: context)
        self.now = now
    }

    /// The flows' admit step: counts the request against each budget; over one, 429
    /// `rate_limited` and nothing of them stays spent.
    func spend() async throws(FlowError) {
        let spent = try await self.limiter.spend(self.budgets, now: self.now)
        self.spent.withLockedValue { $0.windows += spent.windows }
    }

    /// Runs a request's flow, whose admit step is ``spend()``: when the flow refuses the request
    /// after it (a 4xx: nothing stored), what it spent is given back. A 5xx keeps it spent (the
    /// store may have committed).
    func refundingOnRefusal<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch {
            let spent = self.spent.withLockedValue { spent in
                defer { spent = RateLimiter.Spent() }
                return spent
            }
            if let refused = error as? APIError, (400..<500).contains(refused.status.code) {
                await self.limiter.refund(spent)
            }
            throw error
        }
    }
}
