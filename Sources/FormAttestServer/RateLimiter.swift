//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Crypto
import FormAttestFlows
public import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// Rate limits per user and per client address on the endpoints that write (challenge, attest,
/// register-pooled): fixed windows counted in the store, so that every instance sharing it
/// shares the limits. Over a limit: 429 `rate_limited` with `Retry-After`.
public struct RateLimits: Sendable, Hashable {
    /// Requests per window per user, per endpoint.
    public var perUser: Int
    /// Requests per window per client address, per endpoint.
    public var perAddress: Int
    /// The window, in seconds.
    public var window: TimeInterval
    /// How many reverse proxies in front of the service append to `X-Forwarded-For`: the client
    /// address is the entry the outermost of them added. 0: the connection's peer, and
    /// `X-Forwarded-For` is ignored (a client could write anything there).
    public var trustedProxyHops: Int

    /// Defaults: 30 a minute per user and per address, no proxy.
    public init(perUser: Int = 30, perAddress: Int = 30, window: TimeInterval = 60, trustedProxyHops: Int = 0) {
        self.perUser = perUser
        self.perAddress = perAddress
        self.window = window
        self.trustedProxyHops = trustedProxyHops
    }
}

struct RateLimiter: Sendable {
    let limits: RateLimits
    let store: any OperationalAttestationStore

    /// Counts this request against the user's and the address's windows; throws 429 when either
    /// is over its limit (503 when the store cannot count: fail closed).
    func check(endpoint: String, user: String?, request: Request, context: AppRequestContext, now: Date) async throws {
        let start = Date(timeIntervalSince1970: (now.timeIntervalSince1970 / self.limits.window).rounded(.down) * self.limits.window)
        let end = start.addingTimeInterval(self.limits.window)
        var subjects: [(kind: String, subject: String, limit: Int)] = []
        // A trusted backend is the one client address of every user: its address is no client's
        // (one user could exhaust everyone's budget), unless proxies name the client.
        if context.identity?.kind != .trustedBackend || self.limits.trustedProxyHops > 0 {
            subjects.append(("address", self.clientAddress(request, context), self.limits.perAddress))
        }
        if let user { subjects.append(("user", user, self.limits.perUser)) }
        for (kind, subject, limit) in subjects {
            let window = RateLimitWindow(id: Self.digest(endpoint, kind, subject), start: start, expiresAt: end)
            let count: Int
            do {
                count = try await self.store.countRequest(in: window)
            } catch {
                throw APIError(FlowError(code: .init(StoreError.Code.unavailable), category: .storeUnavailable, reason: error.reason))
            }
            if count > limit {
                let retryAfter = max(1, Int(end.timeIntervalSince(now).rounded(.up)))
                throw APIError.rateLimited(retryAfter: retryAfter, reason: "too many \(endpoint) requests for this \(kind); retry in \(retryAfter) s")
            }
        }
    }

    /// The client's address: the connection's peer, or with trusted proxies the entry of
    /// `X-Forwarded-For` the outermost trusted proxy added. Anything unparsable counts as the
    /// peer (the proxy), which limits more, never less.
    func clientAddress(_ request: Request, _ context: AppRequestContext) -> String {
        let peer = context.remoteAddress?.ipAddress ?? "unknown"
        let hops = self.limits.trustedProxyHops
        guard hops > 0 else { return peer }
        let entries = request.headers[values: .xForwardedFor].flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }
        guard entries.count >= hops else { return peer }
        let candidate = entries[entries.count - hops]
        guard (try? SocketAddress(ipAddress: candidate, port: 0)) != nil else { return peer }
        return candidate
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

extension HTTPField.Name {
    static let xForwardedFor = HTTPField.Name("X-Forwarded-For")!
}
