//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import ArgumentParser
import CanonicalJSON
import Configuration
import FormAttestFlows
import Foundation

/// One of `serve`'s settings, defined once: its key (the configuration file's member name; the
/// flag is `--key`), its environment variables, what values it takes, its default and its help.
/// Flags, environment variables and the configuration file are read through swift-configuration's
/// providers, and every value, whatever its source, goes through the same strict check.
package struct ServeSetting: Sendable {
    package enum Kind: Sendable {
        /// Non-empty text without control or invisible characters (``Setting/checkText(_:_:)``).
        case text
        /// A file or directory path (non-empty text without control or invisible characters).
        case path
        /// ASCII digits, 1-65535.
        case port
        /// ASCII digits within the range.
        case integer(ClosedRange<Int>)
        /// Seconds: ASCII digits with an optional fraction, within the range.
        case seconds(ClosedRange<Double>)
        /// One of these words, spelled exactly.
        case choice([String])
        /// A switch: the flag alone; `true` or `false` in a variable; JSON true or false in the file.
        case toggle
        /// Values: a repeatable flag, a comma-separated variable, a JSON array of strings.
        case list
    }

    package let key: String
    /// The variables that set it, in the documented spelling (the first is the one to use).
    let environment: [String]
    package let kind: Kind
    /// The default value (checked like any other); `nil` when there is none.
    package let defaultValue: String?
    /// What the default means, for the table when there is no default value ("none").
    let defaultMeaning: String?
    let help: String
    /// A value that may carry a credential (a MongoDB URI): never echoed, redacted in logs.
    let secret: Bool
    /// A check beyond the kind's, per value: the problem, or nil.
    let check: (@Sendable (String) -> String?)?

    init(
        _ key: String, env: [String], _ kind: Kind, default defaultValue: String? = nil, meaning: String? = nil,
        secret: Bool = false, help: String, check: (@Sendable (String) -> String?)? = nil
    ) {
        self.key = key
        self.environment = env
        self.kind = kind
        self.defaultValue = defaultValue
        self.defaultMeaning = meaning
        self.help = help
        self.secret = secret
        self.check = check
    }

    package var flag: String { "--" + self.key }

    /// The help ArgumentParser prints: the text, the default and the variables.
    var argumentHelp: ArgumentHelp {
        var parts: [String] = []
        if let shown = self.defaultValue ?? self.defaultMeaning { parts.append("default \(shown)") }
        if !self.environment.isEmpty { parts.append(self.environment.joined(separator: " or ")) }
        parts.append("config file: \"\(self.key)\"")
        return ArgumentHelp("\(self.help) (\(parts.joined(separator: "; "))).")
    }
}

/// The table of every `serve` setting (docs/configuration.md is generated from it; a test keeps
/// the two the same).
package enum ServeSettings {
    /// The shortest `revoked-key-retention`: the window the service counts a user's registrations
    /// and pool challenges over (``ServerConfiguration/minimumRevokedRetention`` with serve's flows).
    static let minimumRevokedKeyRetention: Double = 30 * 86_400

    package static let all: [ServeSetting] = [
        .init(
            "config", env: ["FORMATTEST_CONFIG"], .path, meaning: "none",
            help: "A JSON configuration file: an object whose members are the settings below by their key"),
        .init("host", env: ["FORMATTEST_HOST"], .text, default: "127.0.0.1", help: "Address to listen on", check: { Setting.hostProblem($0) }),
        .init("port", env: ["FORMATTEST_PORT"], .port, default: "8080", help: "Port to listen on, 1-65535"),
        .init(
            "admin-host", env: ["FORMATTEST_ADMIN_HOST"], .text, meaning: "127.0.0.1 when --admin-port is set",
            help: "Address of the operators' listener (/metrics, /admin/*)", check: { Setting.hostProblem($0) }
        ),
        .init(
            "admin-port", env: ["FORMATTEST_ADMIN_PORT"], .port, meaning: "none: /metrics and /admin/* on the public port",
            help: "Port of the operators' listener; when set, the public port no longer serves /metrics and /admin/*"
        ),
        .init(
            "store", env: ["FORMATTEST_STORE", "FORMATTEST_MONGODB_URI"], .text, meaning: "sqlite:DATA-DIR/formattest.sqlite", secret: true,
            help: "sqlite:PATH (its directory must exist, but for the data directory), a mongodb:// or mongodb+srv:// URI, or memory",
            check: { StoreSource.locationProblem($0) }
        ),
        .init("mongodb-database", env: ["FORMATTEST_MONGODB_DATABASE"], .text, meaning: "the URI's, else formattest", help: "MongoDB database name"),
        .init(
            "mongodb-collection-prefix", env: ["FORMATTEST_MONGODB_COLLECTION_PREFIX"], .text, default: "formattest_",
            help: "Prefix of the MongoDB collections"),
        .init(
            "data-dir", env: ["FORMATTEST_DATA_DIR"], .path, default: "./formattest-data",
            help: "The data directory (the signing key; the default SQLite file), created 0700 if missing"),
        .init(
            "signing-key", env: ["FORMATTEST_SIGNING_KEY"], .path, meaning: "the data directory's, generated on first start",
            help: "A PEM P-256 private key to sign tokens with"),
        .init("issuer", env: ["FORMATTEST_ISSUER"], .text, default: "formattest", help: "The tokens' issuer (iss)"),
        .init("audience", env: ["FORMATTEST_AUDIENCE"], .text, default: "formattest", help: "The tokens' audience (aud)"),
        .init(
            "app-id", env: ["FORMATTEST_APP_IDS"], .list, default: "ABCDE12345.com.formattest.demo",
            help: "Accepted App IDs, TEAMID.bundleID", check: { AppAttestPolicy.appIDProblem($0) }
        ),
        .init(
            "environment", env: ["FORMATTEST_ENVIRONMENT"], .choice(EnvironmentChoice.allCases.map(\.rawValue)), default: "any",
            help: "Accepted App Attest environment"),
        .init("root", env: ["FORMATTEST_ROOTS"], .list, meaning: "Apple's App Attestation root alone", help: "PEM trust anchors"),
        .init(
            "form-max-age", env: ["FORMATTEST_FORM_MAX_AGE"], .seconds(1...604_800), default: "300",
            help: "Seconds a form's timestamp may lie in the past"),
        .init(
            "form-max-skew", env: ["FORMATTEST_FORM_MAX_SKEW"], .seconds(0...3600), default: "30",
            help: "Seconds a form's timestamp may lie in the future"),
        .init(
            "challenge-lifetime", env: ["FORMATTEST_CHALLENGE_LIFETIME"], .seconds(1...86_400), default: "120", help: "Seconds a form challenge lives"
        ),
        .init(
            "require-challenge", env: ["FORMATTEST_REQUIRE_CHALLENGE"], .toggle, default: "false", help: "Every form must answer a server challenge"),
        .init(
            "rotate-challenges", env: ["FORMATTEST_ROTATE_CHALLENGES"], .toggle, default: "false", help: "Return a fresh challenge with every answer"),
        .init(
            "max-key-age", env: ["FORMATTEST_MAX_KEY_AGE"], .seconds(60...315_360_000), meaning: "none",
            help: "Keys older than this many seconds must re-attest"),
        .init(
            "counter-rule", env: ["FORMATTEST_COUNTER_RULE"], .choice(["tolerant", "strict"]), default: "tolerant",
            help:
                "A validly signed late counter over a new form: tolerant refuses it (409 counter_out_of_order) and retires the key only when its stored counter is signed over another form (a clone); strict retires the key (428)"
        ),
        .init(
            "idle-timeout", env: ["FORMATTEST_IDLE_TIMEOUT"], .seconds(0.001...86_400), default: "60",
            help: "Seconds before a connection that sends nothing is closed"),
        .init(
            "body-timeout", env: ["FORMATTEST_BODY_TIMEOUT"], .seconds(0.001...86_400), default: "10",
            help:
                "Seconds a request body may take to arrive (408 after), and an answer part to be taken by the client (the connection is closed after)"
        ),
        .init(
            "min-body-rate", env: ["FORMATTEST_MIN_BODY_RATE"], .integer(0...100_000_000), default: "1000",
            help:
                "Bytes a second a request body must keep arriving at, counted over the last 2 s, after a 1 s grace (408 and the connection closed after); 0: no minimum"
        ),
        .init(
            "purge-interval", env: ["FORMATTEST_PURGE_INTERVAL"], .seconds(0.1...86_400), default: "60",
            help: "Seconds between passes that delete expired challenges, form hashes and rate-limit windows"
        ),
        .init(
            "purge-step-target", env: ["FORMATTEST_PURGE_STEP_TARGET"], .seconds(0.0005...1), default: "0.005",
            help: "Seconds one step of the purge may hold the store's writer (steps are sized to it; requests' writes run between them)"
        ),
        .init(
            "revoked-key-retention", env: ["FORMATTEST_REVOKED_KEY_RETENTION"], .seconds(2_592_000...315_360_000), default: "2592000",
            help:
                "Seconds a revoked App Attest key or passkey is kept, with its registration, after its revocation; the purge deletes it then. At least 2592000 (30 days): a user's registrations are counted over the last 30 days, revoked keys included",
            check: { text in
                // Asked about a number below the kind's range (serve's minimum), to say why.
                guard let seconds = Double(text), seconds < ServeSettings.minimumRevokedKeyRetention else { return nil }
                return
                    "must be at least \(Int(ServeSettings.minimumRevokedKeyRetention)) (30 days), not \(text.debugDescription): a user's registrations are counted over the last 30 days, revoked keys included, and a key purged sooner after its revocation could leave that count"
            }
        ),
        .init(
            "require-valid-receipt", env: ["FORMATTEST_REQUIRE_VALID_RECEIPT"], .toggle, default: "false",
            help: "Reject attestations whose receipt does not verify (Apple Root CA - G3)"
        ),
        .init(
            "validation-category", env: ["FORMATTEST_VALIDATION_CATEGORIES"], .list, meaning: "any",
            help: "Accepted iOS 27 validation categories: names (\(ValidationCategory.named.map(\.name).joined(separator: ", "))) or numbers",
            check: { (try? SignalPolicy.categories([$0], name: "")) == nil ? "\($0.debugDescription) is not a validation category" : nil }
        ),
        .init(
            "minimum-bundle-version", env: ["FORMATTEST_MINIMUM_BUNDLE_VERSION"], .text, meaning: "none",
            help: "Refuse a bundle version below this dot-separated numeric version",
            check: { BundleVersion($0) == nil ? "\($0.debugDescription) is not a dot-separated numeric version such as 1.2.3" : nil }
        ),
        .init(
            "allowed-cdhash", env: ["FORMATTEST_ALLOWED_CDHASHES"], .list, meaning: "any", help: "Allowed CDHashes, hex (64 or 40 digits)",
            check: {
                (try? SignalPolicy.cdHashes([$0], name: "")) == nil ? "\($0.debugDescription) is not a CDHash (64 or 40 hex digits)" : nil
            }
        ),
        .init(
            "allowed-cdhashes-file", env: ["FORMATTEST_ALLOWED_CDHASHES_FILE"], .path, meaning: "none",
            help: "A JSON file of allowed CDHashes by bundle version: {\"1.2.3\": [\"hex\", ...]}",
            check: { path in
                do {
                    try StrictModes.checkRegularFile(path, "the file")
                    _ = try SignalPolicy.cdHashFile(path, name: "")
                    return nil
                } catch {
                    return "\(path): \(error)"
                }
            }
        ),
        .init("require-cdhash", env: ["FORMATTEST_REQUIRE_CDHASH"], .toggle, default: "false", help: "Refuse what carries no CDHash"),
        .init(
            "require-extensions", env: ["FORMATTEST_REQUIRE_EXTENSIONS"], .toggle, default: "false",
            help: "Refuse what lacks the iOS 27 validation category or bundle version"
        ),
        .init(
            "macos-access-control", env: ["FORMATTEST_MACOS_ACCESS_CONTROL"], .text, meaning: "none",
            help: "Require exactly this access-control extension (1.2.840.113635.100.8.6) value, base64",
            check: { (try? SignalPolicy.accessControl($0, name: "")) == nil ? "not base64 (the access-control extension's DER value)" : nil }
        ),
        .init(
            "caller-jwks", env: ["FORMATTEST_CALLER_JWKS"], .text, meaning: "none", help: "The identity provider's JWKS: a file, or an https:// URL"),
        .init(
            "caller-issuer", env: ["FORMATTEST_CALLER_ISSUER"], .text, meaning: "none", help: "The identity provider's iss, required with caller-jwks"
        ),
        .init(
            "caller-audience", env: ["FORMATTEST_CALLER_AUDIENCE"], .text, meaning: "none",
            help: "This service's aud in the provider's tokens, required with caller-jwks"),
        .init("caller-user-claim", env: ["FORMATTEST_CALLER_USER_CLAIM"], .text, default: "sub", help: "The token claim that names the user"),
        .init(
            "bind-session", env: ["FORMATTEST_BIND_SESSION"], .choice(["sid", "none"]), default: "sid",
            help: "sid: a form must carry session = the token's sid when it has one"),
        .init(
            "caller-secret-file", env: ["FORMATTEST_CALLER_SECRET_FILE"], .path, meaning: "none",
            help: "A trusted backend's shared secrets, one per line (Authorization: Bearer)"),
        .init(
            "admin-secret-file", env: ["FORMATTEST_ADMIN_SECRET_FILE"], .path, meaning: "none: no admin API",
            help: "Operators' secrets for /admin/*, one per line"),
        .init(
            "insecure-no-caller-auth", env: ["FORMATTEST_INSECURE_NO_CALLER_AUTH"], .toggle, default: "false",
            help: "INSECURE: trust the body's username without any caller authentication"
        ),
        .init(
            "max-keys-per-user", env: ["FORMATTEST_MAX_KEYS_PER_USER"], .integer(1...1000), default: "10",
            help: "Active keys per user; a new one beyond revokes the least recently used"
        ),
        .init(
            "passkey-rp-id", env: ["FORMATTEST_PASSKEY_RP_ID"], .text, meaning: "none: no passkeys",
            help: "The WebAuthn relying party id passkeys are created for (a domain); with passkey-origin, the service accepts passkeys"
        ),
        .init(
            "passkey-origin", env: ["FORMATTEST_PASSKEY_ORIGINS"], .list, meaning: "none",
            help: "An origin a passkey ceremony may come from (https://bank.example; an iOS app's associated domain's origin); repeatable"
        ),
        .init(
            "factor-policy", env: ["FORMATTEST_FACTOR_POLICY"], .text, default: "*=app-attest",
            help:
                "What each form needs: ACTION=FACTORS rules joined by commas, * for every other form, FACTORS app-attest, passkey, passkey-uv joined by + (docs/passkeys.md)",
            check: { value in
                do throws(FlowError) {
                    _ = try FactorPolicy(setting: value)
                    return nil
                } catch {
                    return error.reason
                }
            }
        ),
        .init(
            "max-passkeys-per-user", env: ["FORMATTEST_MAX_PASSKEYS_PER_USER"], .integer(1...1000), default: "10",
            help: "Active passkeys per user; a new one beyond revokes the least recently used"
        ),
        .init(
            "rate-limit-per-user", env: ["FORMATTEST_RATE_LIMIT_PER_USER"], .integer(1...1_000_000), default: "30",
            help: "Requests per window per user on challenge, attest, register-pooled"),
        .init(
            "rate-limit-per-address", env: ["FORMATTEST_RATE_LIMIT_PER_ADDRESS"], .integer(1...1_000_000), default: "30",
            help: "Requests per window per client address, likewise, and on assert (without caller authentication)"),
        .init(
            "rate-limit-assertions-per-user", env: ["FORMATTEST_RATE_LIMIT_ASSERTIONS_PER_USER"], .integer(1...1_000_000), default: "60",
            help:
                "Assertions per window per user (every one writes a replay record, and with evidence a record file): counted before the flow for a user an identity provider's token or a trusted backend vouches for, and without caller authentication once the key's signature verified"
        ),
        .init(
            "rate-limit-window", env: ["FORMATTEST_RATE_LIMIT_WINDOW"], .seconds(1...86_400), default: "60",
            help: "The rate limits' window in seconds"),
        .init(
            "trusted-proxy-hops", env: ["FORMATTEST_TRUSTED_PROXY_HOPS"], .integer(0...10), default: "0",
            help: "Reverse proxies in front that append X-Forwarded-For (0: the peer address is the client's)"
        ),
        .init(
            "rate-limit-per-backend", env: ["FORMATTEST_RATE_LIMIT_PER_BACKEND"], .integer(1...1_000_000), default: "3000",
            help: "Requests per window per backend secret, per endpoint (assert and inspect included), whatever user they name"
        ),
        .init(
            "rate-limit-backend-unnamed", env: ["FORMATTEST_RATE_LIMIT_BACKEND_UNNAMED"], .integer(1...1_000_000), default: "30",
            help: "Requests per window per backend secret that name no user (pool challenges, the inspector), per endpoint"
        ),
        .init(
            "rate-limit-ipv6-prefix", env: ["FORMATTEST_RATE_LIMIT_IPV6_PREFIX"], .integer(32...128), default: "64",
            help: "The bits of an IPv6 address that name one client, for per-address limits (IPv4 by /32; IPv4-mapped IPv6 as IPv4)"
        ),
        .init(
            "rate-limit-inspect", env: ["FORMATTEST_RATE_LIMIT_INSPECT"], .integer(1...1_000_000), default: "60",
            help:
                "Inspector requests per window per caller (the token's user, the backend, or the address without caller authentication); a backend's count against its rate-limit-per-backend and rate-limit-backend-unnamed too"
        ),
        .init(
            "rate-limit-pool", env: ["FORMATTEST_RATE_LIMIT_POOL"], .integer(1...1_000_000), default: "60",
            help:
                "Pool challenges and register-pooled requests together per window per backend secret, whether or not they name a user (each pool challenge is kept 30 days); only requests that store something spend it (a refused one is given back)"
        ),
        .init(
            "rate-limit-pool-per-user", env: ["FORMATTEST_RATE_LIMIT_POOL_PER_USER"], .integer(1...1_000_000), default: "100",
            help:
                "Pool challenges per user in 30 days (the pool challenges' lifetime), whoever asks for them: a user holds at most twice this many at once"
        ),
        .init(
            "rate-limit-registrations-per-backend", env: ["FORMATTEST_RATE_LIMIT_REGISTRATIONS_PER_BACKEND"], .integer(1...1_000_000), default: "600",
            help:
                "Registrations (attest, register-pooled, passkey register) per window per backend secret, whatever user they name; only requests that store something spend it (a refused one is given back)"
        ),
        .init(
            "rate-limit-registrations-per-user", env: ["FORMATTEST_RATE_LIMIT_REGISTRATIONS_PER_USER"], .integer(1...1_000_000), default: "20",
            help:
                "Registrations (attest, register-pooled, passkey register) per user in 24 hours (a fixed window of a day), whoever asks; a refused one is given back"
        ),
        .init(
            "rate-limit-backend-user-share", env: ["FORMATTEST_RATE_LIMIT_BACKEND_USER_SHARE"], .integer(1...100), default: "10",
            help:
                "The percent of a backend's rate-limit-pool and rate-limit-registrations-per-backend that one user it names may spend in a window (at least 1 each), so that a few hostile accounts cannot spend them for every other user"
        ),
        .init(
            "max-connections", env: ["FORMATTEST_MAX_CONNECTIONS"], .integer(1...1_000_000), default: "1024",
            help:
                "Open connections per listener; over it a new one sheds another (logged, counted): one idle for 1 s (no request in flight), else the oldest request body in progress for 1 s (408), else the connection served most, whose answer carries Connection: close; up to a hard ceiling 1/16 above it (at least 4), where new ones wait in the backlog until those close; one the descriptor limit cannot hold is refused at start (the default is lowered to fit)"
        ),
        .init(
            "max-connections-per-address", env: ["FORMATTEST_MAX_CONNECTIONS_PER_ADDRESS"], .integer(1...1_000_000), default: "128",
            help: "Open connections per peer address; one more is closed at once (not applied with trusted-proxy-hops above 0)"
        ),
        .init(
            "header-timeout", env: ["FORMATTEST_HEADER_TIMEOUT"], .seconds(0.001...86_400), default: "10",
            help: "Seconds a connection may take to send a request's head, from its opening or its last answer (at most idle-timeout)"
        ),
        .init(
            "max-requests-per-connection", env: ["FORMATTEST_MAX_REQUESTS_PER_CONNECTION"], .integer(1...100_000_000), default: "1000",
            help:
                "Requests served on one connection: the answer to the last carries Connection: close and the connection closes (as nginx's keepalive_requests)"
        ),
        .init(
            "max-connection-age", env: ["FORMATTEST_MAX_CONNECTION_AGE"], .seconds(0.001...86_400), default: "300",
            help:
                "Seconds one connection is served: the answer to the first request after them carries Connection: close and the connection closes (as nginx's keepalive_time)"
        ),
        .init(
            "attestation-ca", env: ["FORMATTEST_ATTESTATION_CA"], .path, meaning: "none",
            help: "The packed format's attestation authority directory (with rp-id)"),
        .init(
            "rp-id", env: ["FORMATTEST_RP_ID"], .text, meaning: "none",
            help: "The WebAuthn relying party id of the packed format (with attestation-ca)"),
        .init(
            "evidence-dir", env: ["FORMATTEST_EVIDENCE_DIR"], .path, meaning: "none",
            help:
                "Archive an evidence record of every accepted form here, one file each, never overwritten (an existing, writable directory); implies require-valid-receipt"
        ),
        .init(
            "evidence-in-answer", env: ["FORMATTEST_EVIDENCE_IN_ANSWER"], .toggle, default: "false",
            help: "Return each accepted form's signed evidence record in its answer; implies require-valid-receipt"
        ),
        .init(
            "evidence-log", env: ["FORMATTEST_EVIDENCE_LOG"], .path, meaning: "none",
            help:
                "Append every accepted form's evidence record to the append-only log in this directory (C2SP tlog-tiles; created when missing), with checkpoints signed by evidence-log-key; implies require-valid-receipt"
        ),
        .init(
            "evidence-log-key", env: ["FORMATTEST_EVIDENCE_LOG_KEY"], .path, meaning: "none",
            help:
                "The evidence log's checkpoint key: a file holding a signed-note private key (formattest evidence log-key); needed with evidence-log"
        ),
        .init(
            "min-free-space", env: ["FORMATTEST_MIN_FREE_SPACE"], .integer(0...100_000_000), default: "256",
            help:
                "Megabytes (10^6 bytes) that must stay free on the filesystems of the SQLite store and the evidence archive; below, new forms and challenges get 507 insufficient_storage and /healthz 503 (0: no guard)"
        ),
        .init(
            "dev-simulator", env: ["FORMATTEST_DEV_SIMULATOR"], .toggle, default: "false",
            help: "DEVELOPMENT ONLY: trust the simulator's CA and serve /api/dev/simulate (formattest-dev serve; formattest refuses it)"),
        .init(
            "demo-dir", env: ["FORMATTEST_DEMO_DIR"], .path, default: "demo",
            help: "Directory of the demo page's files; set and missing: refused; the default and missing: no demo page (logged)"
        ),
        .init(
            "log-level", env: ["LOG_LEVEL"], .choice(["trace", "debug", "info", "notice", "warning", "error", "critical"]), default: "info",
            help: "The log's level"
        ),
        .init(
            "otlp-endpoint", env: ["OTEL_EXPORTER_OTLP_ENDPOINT"], .text, meaning: "none: no tracing",
            help:
                "Traces on: a span for each request and its steps, exported over OTLP/HTTP (protobuf) to this base URL's /v1/traces (http:// or https://); a W3C traceparent from the caller is continued and the answer carries traceresponse",
            check: { text in
                let scheme = ["http://", "https://"].first(where: { text.hasPrefix($0) })
                guard let scheme, text.utf8.count > scheme.utf8.count, !text.contains(" ") else { return "must be an http:// or https:// URL" }
                return nil
            }
        ),
        .init(
            "log-format", env: ["FORMATTEST_LOG_FORMAT"], .choice(["text", "json"]), default: "text",
            help:
                "text: swift-log's lines, for a terminal; json: one JSON object a line (time, level, message, requestId, traceId, route, status, ms, code), for a log shipper"
        ),
    ]

    static func setting(_ key: String) -> ServeSetting {
        guard let setting = Self.all.first(where: { $0.key == key }) else { preconditionFailure("no serve setting \(key)") }
        return setting
    }

    /// The setting key of a `ServeOptions` property: its name in kebab case (`maxConnections`,
    /// `max-connections`), as ArgumentParser spells the property's flag.
    package static func key(ofProperty name: String) -> String {
        var key = ""
        for character in name {
            if character.isUppercase {
                key += "-" + character.lowercased()
            } else {
                key.append(character)
            }
        }
        return key
    }

    /// The help of `key`'s flag.
    static func help(_ key: String) -> ArgumentHelp { Self.setting(key).argumentHelp }

    /// The Markdown table of docs/configuration.md.
    static var markdownTable: String {
        var lines = [
            "| key (file) | flag | environment | values | default | meaning |",
            "|---|---|---|---|---|---|",
        ]
        for setting in Self.all {
            let values: String
            switch setting.kind {
            case .text: values = "text"
            case .path: values = "path"
            case .port: values = "1-65535"
            case .integer(let range): values = "\(range.lowerBound)-\(range.upperBound)"
            case .seconds(let range): values = "seconds, \(Setting.plain(range.lowerBound))-\(Setting.plain(range.upperBound))"
            case .choice(let words): values = words.map { "`\($0)`" }.joined(separator: ", ")
            case .toggle: values = "switch (`true`/`false`)"
            case .list: values = "list"
            }
            let shown = setting.defaultValue.map { "`\($0)`" } ?? setting.defaultMeaning ?? ""
            let environment = setting.environment.map { "`\($0)`" }.joined(separator: ", ")
            let help = setting.help.replacingOccurrences(of: "|", with: "\\|")
            lines.append("| `\(setting.key)` | `\(setting.flag)` | \(environment) | \(values) | \(shown) | \(help) |")
        }
        return lines.joined(separator: "\n") + "\n"
    }

    // MARK: - Resolution

    /// Every setting's value after the providers (flag > environment > file > default), checked.
    package struct Resolved: Sendable {
        struct Value: Sendable {
            let texts: [String]
            /// "command line", "environment", "config file PATH", "default".
            let source: String
        }

        fileprivate(set) var values: [String: Value] = [:]
        /// The configuration file holds a secret (StrictModes then refuses it readable by others).
        fileprivate(set) var configurationHoldsSecret = false

        // The readers. Every value was checked against its kind when it was resolved, and the
        // defaults are filled in from the table: a setting with a default is read without a
        // fallback (`integer`, `seconds`, `text`, `choice`), one without by its `IfSet` reader. A
        // key that is not in the table, a setting without a default read as if it had one, or a
        // choice its type cannot hold is a programming error: it stops `serve` at start, which
        // every test that runs the binary does (`ServeOptionsTests` also resolve every default and
        // convert every choice).

        /// The setting's value, its default when no source sets it.
        package func text(_ key: String) -> String { self.required(key) }
        package func textIfSet(_ key: String) -> String? { self.first(key) }
        package func list(_ key: String) -> [String] {
            _ = ServeSettings.setting(key)
            return self.values[key]?.texts ?? []
        }
        package func toggle(_ key: String) -> Bool { self.first(key) == "true" }
        package func integer(_ key: String) -> Int { Self.converted(self.required(key), key, Int.init) }
        package func integerIfSet(_ key: String) -> Int? { self.first(key).map { Self.converted($0, key, Int.init) } }
        package func seconds(_ key: String) -> Double { Self.converted(self.required(key), key, Double.init) }
        package func secondsIfSet(_ key: String) -> Double? { self.first(key).map { Self.converted($0, key, Double.init) } }
        /// A `seconds` setting as a duration, to the microsecond.
        package func duration(_ key: String) -> Duration { .microseconds(Int64((self.seconds(key) * 1_000_000).rounded())) }
        /// A `choice` setting as the type whose raw values its words are.
        package func choice<Choice: RawRepresentable>(_ key: String, as type: Choice.Type = Choice.self) -> Choice where Choice.RawValue == String {
            Self.converted(self.required(key), key, Choice.init(rawValue:))
        }
        package func source(_ key: String) -> String {
            _ = ServeSettings.setting(key)
            return self.values[key]?.source ?? "default"
        }
        package func isSet(_ key: String) -> Bool {
            _ = ServeSettings.setting(key)
            return self.values[key].map { $0.source != "default" } ?? false
        }
        /// The setting as a message names it: its flag, and where its value came from when a
        /// source set it (`--rp-id (environment)`, `--attestation-ca (config file PATH)`); the
        /// flag alone when none did.
        package func name(_ key: String) -> String {
            self.isSet(key) ? "\(ServeSettings.setting(key).flag) (\(self.source(key)))" : ServeSettings.setting(key).flag
        }

        /// An option group's check run on these settings. The checks the groups share with other
        /// commands throw ArgumentParser's `ValidationError`, which it prints with a command's
        /// usage; `serve` reports the same message as a ``UsageError``, as its own checks do.
        func reported<Value>(_ make: () throws -> Value) throws -> Value {
            do {
                return try make()
            } catch let error as ValidationError {
                throw UsageError(error.message)
            }
        }

        private func first(_ key: String) -> String? {
            _ = ServeSettings.setting(key)
            return self.values[key]?.texts.first
        }

        private func required(_ key: String) -> String {
            guard let text = self.first(key) else { preconditionFailure("serve setting \(key) has no default: read it with its IfSet reader") }
            return text
        }

        private static func converted<Value>(_ text: String, _ key: String, _ convert: (String) -> Value?) -> Value {
            guard let value = convert(text) else {
                preconditionFailure("serve setting \(key): \(text.debugDescription) passed its check but does not convert")
            }
            return value
        }
    }

    /// The flags of single-value settings that `arguments` (serve's, after the subcommand) give
    /// more than once, as `--key value` or `--key=value`, sorted: ArgumentParser keeps the last
    /// of them without a word. A list setting (`--app-id`) may be repeated; `--` ends the flags.
    package static func repeatedFlags(_ arguments: [String]) -> [String] {
        var counts: [String: Int] = [:]
        for argument in arguments {
            if argument == "--" { break }
            guard argument.hasPrefix("--") else { continue }
            let key = String(argument.dropFirst(2).prefix { $0 != "=" })
            guard let setting = Self.all.first(where: { $0.key == key }), !setting.kind.isList else { continue }
            counts[key, default: 0] += 1
        }
        return counts.filter { $0.value > 1 }.map { "--" + $0.key }.sorted()
    }

    /// Reads every setting from the flags given, the environment and the configuration file (named
    /// by `config`, from the flags or the environment), checks each value the same way, and fills
    /// in the defaults. Throws a ``UsageError`` that names the setting as its source spells it.
    package static func resolve(flags: [String: [String]], environment: [String: String]) throws -> Resolved {
        let secretKeys = Set(Self.all.filter(\.secret).map(\.key))
        var flagValues: [AbsoluteConfigKey: ConfigValue] = [:]
        for (key, texts) in flags where !texts.isEmpty {
            let setting = Self.setting(key)
            let content: ConfigContent
            switch setting.kind {
            case .list: content = .stringArray(texts)
            case .toggle: content = .bool(texts == ["true"])
            default: content = .string(texts[texts.count - 1])
            }
            flagValues[AbsoluteConfigKey([key])] = ConfigValue(content, isSecret: setting.secret)
        }
        let commandLine = InMemoryProvider(name: "command line", values: flagValues).snapshot()
        let variables = EnvironmentVariablesProvider(
            environmentVariables: environment,
            secretsSpecifier: .specific(Set(Self.all.filter(\.secret).flatMap(\.environment)))
        ).snapshot()

        var resolved = Resolved()
        // The configuration file's path comes from the flag or the variable alone.
        let configSetting = Self.setting("config")
        var sources: [Source] = [.commandLine(commandLine), .environment(variables)]
        if let found = try Self.lookup(configSetting, in: sources) {
            resolved.values["config"] = found
            let path = found.texts[0]
            let file = try Self.configFile(path, secretKeys: secretKeys)
            resolved.configurationHoldsSecret = file.holdsSecret
            sources.append(.file(file.snapshot, path: path))
        }
        for setting in Self.all where setting.key != "config" {
            if let found = try Self.lookup(setting, in: sources) {
                resolved.values[setting.key] = found
            } else if let value = setting.defaultValue {
                resolved.values[setting.key] = Resolved.Value(
                    texts: setting.kind.isList ? value.split(separator: ",").map(String.init) : [value], source: "default")
            }
        }
        return resolved
    }

    enum Source {
        case commandLine(any ConfigSnapshot)
        case environment(any ConfigSnapshot)
        case file(any ConfigSnapshot, path: String)
    }

    /// The value of the first source that has the setting. Every source's value is checked, also
    /// those a higher source overrides: a bad value anywhere stops the service. The snapshots are
    /// asked directly, in precedence order, rather than through ConfigReader's non-throwing
    /// getters, which fall back to the default on a value they cannot convert.
    private static func lookup(_ setting: ServeSetting, in sources: [Source]) throws -> Resolved.Value? {
        var first: Resolved.Value?
        for source in sources {
            if let value = try Self.value(setting, in: source), first == nil { first = value }
        }
        return first
    }

    /// The setting's value in one source, checked; nil when the source does not set it.
    private static func value(_ setting: ServeSetting, in source: Source) throws -> Resolved.Value? {
        switch source {
        case .commandLine(let snapshot):
            let type: ConfigType = setting.kind.isList ? .stringArray : setting.kind.isToggle ? .bool : .string
            guard let content = try snapshot.value(forKey: AbsoluteConfigKey([setting.key]), type: type).value?.content else { return nil }
            let texts: [String]
            switch content {
            case .stringArray(let list): texts = list
            case .bool(let on): texts = [on ? "true" : "false"]
            case .string(let text): texts = [text]
            default: return nil
            }
            if setting.kind.isToggle && texts == ["false"] { return nil }  // a flag not given
            return Resolved.Value(texts: try Self.checked(texts, setting, name: setting.flag, source: "command line"), source: "command line")
        case .environment(let snapshot):
            var found: (name: String, text: String)?
            for name in setting.environment {
                guard case .string(let text)? = try snapshot.value(forKey: AbsoluteConfigKey([name]), type: .string).value?.content else { continue }
                if let earlier = found, earlier.text != text {
                    throw UsageError("\(earlier.name) and \(name) are both set, to different values: set one (environment).")
                }
                found = (name, text)
            }
            guard let found else { return nil }
            let texts = setting.kind.isList ? found.text.split(separator: ",", omittingEmptySubsequences: false).map(String.init) : [found.text]
            return Resolved.Value(texts: try Self.checked(texts, setting, name: found.name, source: "environment"), source: "environment")
        case .file(let snapshot, let path):
            let key = AbsoluteConfigKey([setting.key])
            let label = "config file \(path)"
            let texts: [String]
            do {
                switch setting.kind {
                case .list:
                    guard case .stringArray(let list)? = try snapshot.value(forKey: key, type: .stringArray).value?.content else { return nil }
                    texts = list
                case .toggle:
                    guard case .bool(let on)? = try snapshot.value(forKey: key, type: .bool).value?.content else { return nil }
                    texts = [on ? "true" : "false"]
                case .port, .integer:
                    guard case .int(let number)? = try snapshot.value(forKey: key, type: .int).value?.content else { return nil }
                    texts = [String(number)]
                case .seconds:
                    guard case .double(let number)? = try snapshot.value(forKey: key, type: .double).value?.content else { return nil }
                    texts = [Setting.plain(number)]
                case .text, .path, .choice:
                    guard case .string(let text)? = try snapshot.value(forKey: key, type: .string).value?.content else { return nil }
                    texts = [text]
                }
            } catch {
                throw UsageError("\(setting.key) (\(label)): the value is not of the setting's type.")
            }
            return Resolved.Value(texts: try Self.checked(texts, setting, name: setting.key, source: label), source: label)
        }
    }

    /// Every value through the kind's check and the setting's own.
    private static func checked(_ texts: [String], _ setting: ServeSetting, name: String, source: String) throws -> [String] {
        func refuse(_ problem: String) -> UsageError { UsageError("\(name) (\(source)): \(problem).") }
        guard !texts.isEmpty else { throw refuse("give at least one value") }
        if !setting.kind.isList && texts.count > 1 { throw refuse("give one value") }
        for text in texts {
            do {
                try Setting.checkText(text, name)
            } catch {
                throw refuse(Setting.textRule)
            }
            let shown = setting.secret ? "the value given" : text.debugDescription
            switch setting.kind {
            case .text, .path, .list: break
            case .port:
                guard Self.isDigits(text), text.utf8.count <= 5, let port = Int(text), (1...65535).contains(port) else {
                    throw refuse("must be a port number 1-65535, not \(shown)")
                }
            case .integer(let range):
                guard Self.isDigits(text), text.utf8.count <= 9, let number = Int(text), range.contains(number) else {
                    throw refuse("must be a whole number \(range.lowerBound)-\(range.upperBound), not \(shown)")
                }
            case .seconds(let range):
                let parts = text.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
                guard parts.allSatisfy({ Self.isDigits(String($0)) }), text.utf8.count <= 20, let seconds = Double(text), range.contains(seconds)
                else {
                    // A number out of range: the setting's own check, when it has one, says why.
                    if Double(text) != nil, let problem = setting.check?(text) { throw refuse(problem) }
                    throw refuse(
                        "must be a number of seconds from \(Setting.plain(range.lowerBound)) to \(Setting.plain(range.upperBound)), not \(shown)")
                }
            case .choice(let words):
                guard words.contains(text) else { throw refuse("must be one of \(words.joined(separator: ", ")), not \(shown)") }
            case .toggle:
                guard text == "true" || text == "false" else { throw refuse("must be true or false, not \(shown)") }
            }
            if let problem = setting.check?(text) { throw refuse(problem) }
        }
        return texts
    }

    /// A secret setting's value that carries a credential: a URI with user information
    /// (`mongodb://user:password@host`) or a password parameter. `memory` and `sqlite:PATH` do not.
    static func holdsCredential(_ text: String) -> Bool {
        text.contains("@") || text.lowercased().contains("password")
    }

    private static func isDigits(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.allSatisfy { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
    }

    /// The configuration file, read once: checked with the strict JSON parser (an object; no
    /// duplicate member; every member a known setting with a value of its type), then the same
    /// bytes handed to swift-configuration's JSON snapshot.
    private static func configFile(_ path: String, secretKeys: Set<String>) throws -> (snapshot: any ConfigSnapshot, holdsSecret: Bool) {
        let label = "config file \(path)"
        let bytes: [UInt8]
        try StrictModes.checkRegularFile(path, "--config (\(label)): the configuration file")
        do {
            bytes = try InputFile.readBytes(path)
        } catch {
            throw UsageError("--config (\(label)): \(error)")
        }
        let value: JSONValue
        do {
            // Numbers exact: one a double cannot hold (2.9999999999999999, a retention a hair under
            // its minimum) would be rounded into a value nobody wrote, past the range checks.
            value = try CanonicalJSON.parse(bytes, limits: .init(exactNumbers: true))
        } catch  where error.code == .inexactNumber {
            throw UsageError("\(label): a number is not exactly what it will be read as: \(error.reason).")
        } catch {
            throw UsageError("\(label): not strict JSON: \(error.reason)")
        }
        guard case .object(let object) = value else { throw UsageError("\(label): expected a JSON object of settings.") }
        var holdsSecret = false
        for member in object.members {
            let name = member.name.string
            guard name != "config", let setting = Self.all.first(where: { $0.key == name }) else {
                throw UsageError("\(label): \(name.debugDescription) is not a setting (docs/configuration.md lists them).")
            }
            let fits: Bool
            switch (setting.kind, member.value) {
            case (.list, .array(let items)): fits = items.allSatisfy { $0.stringValue != nil }
            case (.toggle, .bool): fits = true
            case (.port, .number(let number)), (.integer, .number(let number)): fits = number == number.rounded() && abs(number) < 1e9
            case (.seconds, .number): fits = true
            case (.text, .string), (.path, .string), (.choice, .string): fits = true
            default: fits = false
            }
            guard fits else {
                let expected: String
                switch setting.kind {
                case .list: expected = "an array of strings"
                case .toggle: expected = "true or false"
                case .port, .integer: expected = "a whole number"
                case .seconds: expected = "a number"
                case .text, .path, .choice: expected = "a string"
                }
                throw UsageError("\(name) (\(label)): expected \(expected).")
            }
            if setting.secret, let text = member.value.stringValue, Self.holdsCredential(text) { holdsSecret = true }
        }
        do {
            return try (
                JSONSnapshot(
                    data: bytes.span.bytes,
                    providerName: label,
                    parsingOptions: .init(secretsSpecifier: .specific(secretKeys))
                ), holdsSecret
            )
        } catch {
            throw UsageError("\(label): \(error)")
        }
    }
}

extension ServeSetting.Kind {
    package var isList: Bool {
        if case .list = self { return true }
        return false
    }

    package var isToggle: Bool {
        if case .toggle = self { return true }
        return false
    }
}
