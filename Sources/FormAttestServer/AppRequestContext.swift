//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import Hummingbird

/// The request context: bodies are capped at 64 KiB (attestation objects are about 5.5 KB).
public struct AppRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage

    public init(source: Source) {
        self.coreContext = .init(source: source)
    }

    public var maxUploadSize: Int { 64 * 1024 }
}
