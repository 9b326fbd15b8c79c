//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import FormAttestFlows
import FormAttestForm
import Foundation
import HTTPTypes
import WebAuthn

/// Every error code a client can receive, with its HTTP status, what it means and what the client
/// should do. The statuses are not written here: each is what ``APIError`` answers for the error
/// that carries the code (the flows' codes through ``APIError/init(_:)-(FlowError)``). The codes of
/// the verifier, the form rules, the stores, caller authentication and the receipt exchange come
/// from their `allCases`, and each code's meaning from its declaration (each code type's
/// `summary`); docs/errors.md is generated from ``markdownTable`` (`formattest errors`), and a
/// test keeps both complete.
public enum ErrorCatalog {
    /// One code.
    public struct Entry: Sendable, Hashable {
        public let code: String
        /// The HTTP status; `nil` for `http_error`, which carries the framework's own.
        public let status: Int?
        public let meaning: String
        public let action: String
    }

    /// Every code with each status it is answered with, sorted by status then code.
    public static var entries: [Entry] {
        var byAnswer: [String: Entry] = [:]
        for entry in Self.all {
            let key = "\(entry.code) \(entry.status.map(String.init) ?? "-")"
            byAnswer[key] = byAnswer[key] ?? entry
        }
        return byAnswer.values.sorted { ($0.status ?? 999, $0.code) < ($1.status ?? 999, $1.code) }
    }

    /// Codes that two sources answer with different statuses: each has a row per status, and the
    /// tests pin the list, so that a new one is a decision, not an accident.
    public static var conflicts: [String] {
        var statuses: [String: Set<Int?>] = [:]
        for entry in Self.all { statuses[entry.code, default: []].insert(entry.status) }
        return statuses.filter { $0.value.count > 1 }.map(\.key).sorted()
    }

    /// docs/errors.md's table.
    public static var markdownTable: String {
        var lines = ["| status | code | meaning | what the client should do |", "|---|---|---|---|"]
        for entry in Self.entries {
            lines.append("| \(entry.status.map(String.init) ?? "4xx/5xx") | `\(entry.code)` | \(entry.meaning) | \(entry.action) |")
        }
        return lines.joined(separator: "\n") + "\n"
    }

    // MARK: - The sources

    private static var all: [Entry] {
        var entries: [Entry] = []
        for code in AppAttestError.Code.allCases {
            entries.append(Self.flow(FlowError(AppAttestError(code: code, reason: "")), code.summary))
        }
        for code in FormError.Code.allCases {
            entries.append(Self.flow(FlowError(FormError(code: code, reason: "")), code.summary))
        }
        for code in StoreError.Code.allCases {
            let error = FlowError(StoreError(code: code, reason: ""))
            entries.append(Self.flow(error, error.code.summary ?? code.summary))
        }
        // The passkey verifier's codes, as the flows answer them (each code's summary is written
        // beside its declaration).
        for code in WebAuthnError.Code.allCases {
            let error = FlowError(WebAuthnError(code: code, reason: ""))
            entries.append(Self.flow(error, code.summary, action: error.category == .verificationFailed ? Self.passkeyVerificationAction : nil))
        }
        for code in ReceiptExchangeError.Code.allCases {
            let error = FlowError(code: .init(code), category: .upstreamUnavailable, reason: "")
            entries.append(
                Self.flow(
                    error,
                    "Apple's receipt exchange failed or refused (\(code.identifier.replacingOccurrences(of: "receipt_exchange_", with: ""))); nothing was changed"
                ))
        }
        // The flows' own codes, with the category each is raised with.
        for (code, category) in FlowError.Code.own {
            entries.append(Self.flow(FlowError(code: code, category: category, reason: ""), code.summary))
        }
        for code in CallerAuthenticationError.Code.allCases {
            entries.append(Self.http(APIError(CallerAuthenticationError(code: code, reason: "")), code.summary))
        }
        // The HTTP layer's own.
        entries += [
            Self.http(
                APIError.requestTimeout,
                "the request body did not arrive within the body timeout, or fell behind the minimum body rate; the connection is closed",
                "Send the whole body promptly; retry once on a good connection."),
            Self.http(
                APIError.bodyTooLarge, "the request body is larger than 64 KiB; the connection is closed",
                "Send a smaller request; do not retry it unchanged."),
            Self.http(
                APIError.inspectionTooLarge(0), "the inspector's answer for this object would be larger than the service sends (256 KiB)",
                "Inspect the object locally with formattest inspect."
            ),
            Self.http(
                APIError.invalidQuery(""),
                "the query string is not strictly percent-encoded UTF-8 (a raw non-ASCII byte, a bad % escape, invalid UTF-8) or names a parameter twice",
                "Percent-encode the query string's UTF-8 exactly once per parameter; do not retry unchanged."
            ),
            Self.http(
                APIError.formTooLargeForEvidenceLog(0, limit: 0),
                "with the evidence log on, the form is larger than 24 KiB: its evidence record would not fit one log entry (nothing was stored)",
                "Send a smaller form; do not retry it unchanged."
            ),
            Self.http(
                APIError.evidenceLogRange(""),
                "a proof asked of the evidence log for a leaf or tree size it has not committed (an index at or past the size, a first size above the second, a size past the log's)",
                "Ask for sizes up to the latest checkpoint's."
            ),
            Self.http(
                APIError.evidenceLogUnavailable,
                "the evidence log cannot answer a checkpoint or proof: its copy of a shared log stopped at a batch it refused (another writer's, with a root that is not the log's), or its files failed; the service's log line says which",
                "Retry later; operators: docs/deployment.md, \"The evidence log with many instances\"."
            ),
            Self.http(
                APIError.malformedRequest(""), "the request is not valid HTTP/1.1 (bad chunked encoding, ...)",
                "Fix the client's HTTP; do not retry unchanged."),
            Self.http(
                APIError.framework(status: .notFound, message: nil), "no such route (or the demo page's file is missing)",
                "Check the URL and method against docs/api.md."),
            Self.http(
                APIError.framework(status: .methodNotAllowed, message: nil), "the route exists but not with this method",
                "Use the method docs/api.md gives."),
            Self.http(
                APIError.unknownKey, "admin API: no key has this keyId", "Check the keyId (base64url) against GET /admin/users/{username}/keys."),
            Self.http(
                APIError.unknownPasskey, "admin API: no passkey has this credential id",
                "Check the credentialId (base64url) against GET /admin/users/{username}/passkeys."),
            Self.http(
                APIError.simulatorError(""), "dev simulator only: the simulator could not produce the request", "Development only; read the message."),
            Self.http(
                APIError.simulatorUnknownKey, "dev simulator only: the simulated device holds no key with this keyId (a restart forgets its keys)",
                "Development only; forget the key and attest a new one."
            ),
            Self.http(
                APIError.insufficientStorage,
                "the disk of the store or of the evidence archive is below the free-space threshold: no new form is taken (nothing was changed)",
                "Retry later with backoff; operators must make room (see /healthz)."
            ),
            Self.http(
                APIError.internalError, "an unexpected server error; the message says nothing internal, the log has it",
                "Retry later; report it with the time if it persists."),
            Self.http(
                APIError.framework(status: .gatewayTimeout, message: nil), "another HTTP error of the server framework, with its status",
                "Read the status and message; retry later for a 5xx."),
        ]
        return entries
    }

    private static func flow(_ error: FlowError, _ meaning: String?, action: String? = nil) -> Entry {
        let answer = APIError(error)
        return Entry(
            code: answer.code, status: answer.status.code, meaning: meaning ?? "",
            action: action ?? Self.actions[error.code.identifier] ?? Self.categoryActions[error.category] ?? "")
    }

    /// What a client does when a passkey response fails a check of W3C WebAuthn §7.1 or §7.2.
    private static let passkeyVerificationAction =
        "Do not retry with the same data: it is not a genuine, matching passkey response for this form, user and site. Sign again with the user's registered passkey; treat repeats as fraud signals."

    private static func http(_ error: APIError, _ meaning: String?, _ action: String? = nil) -> Entry {
        // `http_error` carries the framework's status, not the example's.
        let status: Int? = error.code == "http_error" ? nil : error.status.code
        return Entry(code: error.code, status: status, meaning: meaning ?? "", action: action ?? Self.actions[error.code] ?? "")
    }

    private static let categoryActions: [FlowError.Category: String] = [
        .malformedInput: "Fix the request as the message says; resending it unchanged fails again.",
        .verificationFailed:
            "Do not retry with the same data: it is not a genuine, matching attestation or assertion. Attest a new key; treat repeats as fraud signals.",
        .keyMismatch: "Attest a new key (generateKey, attestKey, POST /api/appattest/attest), then sign again.",
        .callerMismatch: "Sign the form for the authenticated user and session.",
        .factorMissing: "Sign the same form again with every signature the message names (see docs/passkeys.md, the factor policy).",
        .conflict: "Do not resend: this form, key or challenge was used already. Build a new form (new nonce) or fetch a new challenge.",
        .policy: "Fix what the message names (time, binding, challenge) and sign a new form.",
        .requiresReattestation: "Attest a new key and sign again.",
        .storeUnavailable: "Retry later with backoff; nothing was changed.",
        .upstreamUnavailable: "Retry later with backoff; nothing was changed.",
        .rateLimited: "Wait the seconds of `Retry-After`, then retry.",
    ]

    private static let actions: [String: String] = [
        "challenge_invalid": "Fetch a new challenge (POST /api/appattest/challenge) and sign a new form with it.",
        "challenge_required": "Fetch a challenge (POST /api/appattest/challenge) and put it in the form.",
        "timestamp_outside_window": "Set the form's timestamp from a correct clock, just before signing; sign again.",
        "unauthenticated": "Send a valid credential in Authorization: Bearer (a fresh identity-provider token, or the backend secret).",
        "identity_mismatch": "Send the username of the authenticated user.",
        "session_mismatch": "Sign the form with the session (sid) of the caller's token.",
        "identity_provider_unavailable": "Retry later; the identity provider's keys could not be fetched, so every request fails closed.",
        "key_revoked": "Attest a new key; the revoked one is refused for good.",
        "requires_reattestation": "Attest a new key and sign again (the key is too old, or it signed one counter over two forms).",
        "counter_out_of_order":
            "Sign the form again (a new assertion, with the key's next counter): a later form of this key was accepted first. The key is kept.",
        "key_attestation_unverifiable":
            "Attest a new key (generateKey, attestKey, POST /api/appattest/attest), or for a passkey register a new one, and sign again; this key cannot back an evidence record.",
        "store_corrupt": "Retry later; operators must check the store (nothing was changed).",
        "receipt_changed": "Nothing to do on the client; the stored receipt changed meanwhile; retry once.",
        "receipt_stale": "Retry later; Apple's new receipt was outside the accepted age.",
        "passkeys_disabled": "Do not send passkeys to this service, or configure its passkey settings (--passkey-rp-id, --passkey-origin).",
        "passkey_mismatch": "Register a passkey for this user (GET /api/passkeys/options, POST /api/passkeys/register), then sign again.",
        "passkey_revoked": "Register a new passkey; the revoked one is refused for good.",
        "passkey_approval_required":
            "Sign the registration's challenge with one of the user's passkeys (user verification) and send it as approval; a user who lost every passkey asks an operator to revoke them first.",
        "passkey_already_registered": "Nothing to do: this credential is registered; sign forms with it.",
        "user_verification_required": "Ask the authenticator for user verification (userVerification: \"required\") and sign the form again.",
    ]
}
