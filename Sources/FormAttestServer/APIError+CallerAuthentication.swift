//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import HTTPTypes

extension APIError {
    /// Caller authentication's outcomes: 401, 403, or 503 when the identity provider's keys are
    /// unavailable (fail closed). The 401 carries a `WWW-Authenticate` challenge.
    init(_ error: CallerAuthenticationError) {
        switch error.code {
        case .identityMismatch, .sessionMismatch:
            self.init(status: .forbidden, code: error.code.identifier, message: error.reason)
        case .identityProviderUnavailable:
            self.init(status: .serviceUnavailable, code: error.code.identifier, message: error.reason)
        default:
            self.init(status: .unauthorized, code: error.code.identifier, message: error.reason, headers: [.wwwAuthenticate: "Bearer"])
        }
    }

    /// 429 with `Retry-After`.
    static func rateLimited(retryAfter seconds: Int, reason: String) -> APIError {
        APIError(status: .tooManyRequests, code: "rate_limited", message: reason, headers: [.retryAfter: String(seconds)])
    }
}
