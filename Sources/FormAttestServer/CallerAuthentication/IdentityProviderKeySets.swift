//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1

/// Where an identity provider's JWKS comes from: a file, or an HTTPS URL (plain HTTP only to a
/// loopback address, for tests and a local provider).
public enum IdentityProviderKeySets {
    /// The largest key set read (a JWKS is a few KB).
    public static let maximumSize = 1 << 20

    /// A location given on the command line: `https://…`, `http://127.0.0.1…`, or a file path.
    public static func source(_ location: String, timeout: Duration = .seconds(10)) throws -> IdentityProviderVerifier.KeySetSource {
        if location.hasPrefix("https://") || location.hasPrefix("http://") {
            guard let url = URL(string: location), let host = url.host,
                url.scheme == "https" || ["127.0.0.1", "localhost", "::1", "[::1]"].contains(host)
            else { throw KeySetError("--caller-jwks: only https:// (or http:// on a loopback address) is accepted: \(location)") }
            return { try await Self.fetch(url, timeout: timeout) }
        }
        let path = location
        guard FileManager.default.isReadableFile(atPath: path) else { throw KeySetError("--caller-jwks: cannot read \(path)") }
        return {
            guard let handle = FileHandle(forReadingAtPath: path) else { throw KeySetError("cannot read \(path)") }
            defer { try? handle.close() }
            let data = try handle.read(upToCount: Self.maximumSize + 1) ?? Data()
            guard data.count <= Self.maximumSize else { throw KeySetError("\(path) is larger than \(Self.maximumSize) bytes") }
            return Array(data)
        }
    }

    static func fetch(_ url: URL, timeout: Duration) async throws -> [UInt8] {
        var request = HTTPClientRequest(url: url.absoluteString)
        request.headers.add(name: "Accept", value: "application/json")
        let response = try await HTTPClient.shared.execute(request, timeout: TimeAmount(timeout))
        guard response.status == .ok else { throw KeySetError("\(url): HTTP \(response.status.code)") }
        let body = try await response.body.collect(upTo: Self.maximumSize)
        return Array(body.readableBytesView)
    }

    public struct KeySetError: Error, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }
}
