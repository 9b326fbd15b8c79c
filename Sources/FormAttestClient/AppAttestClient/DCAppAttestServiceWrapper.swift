//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

#if canImport(DeviceCheck)
    public import DeviceCheck
    public import Foundation

    /// The real `DCAppAttestService` behind ``DCAppAttestServiceProtocol``.
    @available(iOS 14.0, macOS 11.0, tvOS 15.0, watchOS 9.0, *)
    public struct DCAppAttestServiceWrapper: DCAppAttestServiceProtocol {
        private let service: DCAppAttestService

        public init(service: DCAppAttestService = .shared) {
            self.service = service
        }

        public var isSupported: Bool { self.service.isSupported }

        public func generateKey(completionHandler: @escaping @Sendable (String?, (any Error)?) -> Void) {
            self.service.generateKey(completionHandler: completionHandler)
        }

        public func attestKey(
            _ keyId: String,
            clientDataHash: Data,
            completionHandler: @escaping @Sendable (Data?, (any Error)?) -> Void
        ) {
            self.service.attestKey(keyId, clientDataHash: clientDataHash, completionHandler: completionHandler)
        }

        public func generateAssertion(
            _ keyId: String,
            clientDataHash: Data,
            completionHandler: @escaping @Sendable (Data?, (any Error)?) -> Void
        ) {
            self.service.generateAssertion(keyId, clientDataHash: clientDataHash, completionHandler: completionHandler)
        }
    }

    // swift-format-ignore: AvoidRetroactiveConformances
    // DeviceCheck's service is thread-safe but not annotated; the SDK owns the type.
    extension DCAppAttestService: @retroactive @unchecked Sendable {}
#endif
