//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

extension WebAuthnPolicy {
    /// Why `relyingPartyID` can never match what an authenticator hashes, or `nil` when it can: a
    /// relying party id is a lower-case domain name (WebAuthn §5.1.2 "valid domain string"), such
    /// as `bank.example` or `localhost`: no scheme, port, path or trailing dot, not an IP address.
    /// An upper-case or URL-shaped id hashes to bytes no browser sends, and every ceremony fails.
    public static func problem(relyingPartyID: String) -> String? {
        let bytes = Array(relyingPartyID.utf8)
        guard (1...253).contains(bytes.count) else { return "a relying party id is 1 to 253 characters" }
        let labels = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        for label in labels {
            guard (1...63).contains(label.count) else {
                return "\"\(relyingPartyID)\" is not a domain name (an empty label, a leading or trailing dot, or a label over 63 characters)"
            }
            let allowed = label.allSatisfy { byte in
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                    || byte == UInt8(ascii: "-")
            }
            guard allowed, label.first != UInt8(ascii: "-"), label.last != UInt8(ascii: "-") else {
                return "\"\(relyingPartyID)\" is not a lower-case domain name (letters, digits and inner hyphens; no scheme, port or path)"
            }
        }
        if labels.last.map({ $0.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) } }) == true {
            return "\"\(relyingPartyID)\" is an IP address; a relying party id is a domain name"
        }
        return nil
    }

    /// Why `origin` can never equal a client's `clientDataJSON.origin` for `relyingPartyID`, or
    /// `nil`: an origin as browsers serialize it, `https://HOST` or `https://HOST:PORT` (lower
    /// case, no default port, path, query or trailing slash), HOST the relying party id or a
    /// subdomain of it; `http://` only for `localhost` (a secure context); or an Android app's
    /// `android:apk-key-hash:` origin.
    public static func problem(origin: String, relyingPartyID: String) -> String? {
        if origin.hasPrefix("android:apk-key-hash:") {
            let hash = origin.utf8.dropFirst("android:apk-key-hash:".utf8.count)
            let base64URL = hash.allSatisfy { byte in
                (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
            }
            return !hash.isEmpty && base64URL
                ? nil : "\"\(origin)\": an Android app's origin is android:apk-key-hash: and the certificate's hash in base64url"
        }
        let secure = origin.hasPrefix("https://")
        guard secure || origin.hasPrefix("http://") else {
            return "\"\(origin)\" is not an origin (https://HOST[:PORT], as the browser writes it in clientDataJSON)"
        }
        let authority = origin.dropFirst(secure ? "https://".count : "http://".count)
        let parts = authority.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        let host = String(parts[0])
        if parts.count == 2 {
            let port = parts[1]
            guard (1...5).contains(port.utf8.count), port.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
                port.first != "0", let number = Int(port), number <= 65_535
            else {
                return "\"\(origin)\": the port is not a number from 1 to 65535, or the origin has a path (no trailing slash)"
            }
            if (secure && number == 443) || (!secure && number == 80) {
                return "\"\(origin)\": browsers leave the default port out of an origin"
            }
        }
        if let problem = Self.problem(relyingPartyID: host) {
            return "\"\(origin)\": its host is not a lower-case domain name, or the origin has a path (no trailing slash): \(problem)"
        }
        guard host == relyingPartyID || host.hasSuffix("." + relyingPartyID) else {
            return "\"\(origin)\": its host is neither the relying party id \(relyingPartyID) nor a subdomain of it"
        }
        guard secure || host == "localhost" || host.hasSuffix(".localhost") else {
            return "\"\(origin)\": only localhost may use http:// (a secure context); use https://"
        }
        return nil
    }
}
