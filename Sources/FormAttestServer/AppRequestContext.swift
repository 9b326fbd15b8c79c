//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import Hummingbird
public import NIOCore

/// The request context: bodies are capped at 64 KiB (attestation objects are about 5.5 KB); the
/// caller's identity once `CallerAuthenticationMiddleware` established it; the peer address.
public struct AppRequestContext: RequestContext, RemoteAddressRequestContext {
    public var coreContext: CoreRequestContextStorage
    /// Who vouches for the request's user (set by the caller authentication).
    public var identity: CallerIdentity?
    /// The connection's peer (the client, or the nearest proxy).
    public let remoteAddress: SocketAddress?
    /// The connection, to stop reading it after a body was refused (too large, too slow).
    let channel: any Channel

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.remoteAddress = source.channel.remoteAddress
        self.channel = source.channel
    }

    /// Stops reading the connection: it closes once the answer is written. After a refused body
    /// the server must not go on draining it, or a client trickling a huge declared body would
    /// hold the connection (and a file descriptor) as long as it likes.
    func stopReading() {
        self.channel.close(mode: .input, promise: nil)
    }

    /// The largest request body read (attestation objects are about 5.5 KB).
    static let maximumBodySize = 64 * 1024

    public var maxUploadSize: Int { Self.maximumBodySize }
}
