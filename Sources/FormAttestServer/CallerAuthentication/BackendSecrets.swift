//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import Crypto

/// The shared secrets of a trusted backend (`--caller-secret-file`): one per line, several at
/// once so that they can be rotated (add the new one, deploy the backend, remove the old one).
///
/// A presented bearer is compared with each secret in constant time, through their SHA-256
/// digests, so that neither the content nor the length of a secret leaks through timing.
public struct BackendSecrets: Sendable {
    /// The shortest secret accepted: 32 bytes (for example `openssl rand -hex 32` gives 64).
    public static let minimumLength = 32

    private let digests: [[UInt8]]

    /// Parses the file's text: one secret a line; blank lines and lines starting with `#` are
    /// skipped; surrounding spaces are trimmed.
    ///
    /// - Throws: a message naming the problem (no secret, one too short, a control character).
    public init(fileText: String) throws(CallerAuthenticationError) {
        var digests: [[UInt8]] = []
        for (index, rawLine) in fileText.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = rawLine.trimmingSpaces
            if line.isEmpty || line.hasPrefix("#") { continue }
            guard line.utf8.count >= Self.minimumLength else {
                throw .unauthenticated("line \(index + 1): a secret must be at least \(Self.minimumLength) bytes")
            }
            guard !line.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
                throw .unauthenticated("line \(index + 1): a secret must not contain control characters")
            }
            digests.append(Array(SHA256.hash(data: Array(line.utf8))))
        }
        guard !digests.isEmpty else { throw .unauthenticated("the secret file holds no secret") }
        self.digests = digests
    }

    /// Whether `bearer` is one of the secrets. Every secret is compared, whichever matches.
    public func accepts(_ bearer: some StringProtocol) -> Bool {
        self.backend(presenting: bearer) != nil
    }

    /// The name of the backend whose secret `bearer` is (what its rate limits are counted
    /// under: hex of SHA-256 over the secret's digest, never the secret), or nil. Every secret
    /// is compared, whichever matches.
    public func backend(presenting bearer: some StringProtocol) -> String? {
        let presented = Array(SHA256.hash(data: Array(bearer.utf8)))
        var matched: [UInt8]?
        for digest in self.digests where constantTimeEquals(digest, presented) {
            matched = digest
        }
        return matched.map { Self.name(ofDigest: $0) }
    }

    /// Whether the two sets share a secret.
    public func sharesSecret(with other: BackendSecrets) -> Bool {
        self.digests.contains { digest in other.digests.contains { constantTimeEquals($0, digest) } }
    }

    static func name(ofDigest digest: [UInt8]) -> String {
        let named = SHA256.hash(data: Array("formattest-backend".utf8) + digest)
        return named.prefix(12).map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
    }
}

extension Substring {
    var trimmingSpaces: Substring {
        var text = self
        while let first = text.first, first == " " || first == "\t" || first == "\r" { text = text.dropFirst() }
        while let last = text.last, last == " " || last == "\t" || last == "\r" { text = text.dropLast() }
        return text
    }
}
