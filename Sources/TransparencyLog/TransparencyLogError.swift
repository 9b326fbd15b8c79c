//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// The one error type of the `TransparencyLog` module.
///
/// A ``Code`` (stable, machine readable) and a human-readable ``reason``. Two errors compare equal
/// when their codes are equal, so tests can check the code alone.
///
/// ``Code`` is a struct over a private enum so that adding a code is not a breaking change.
public struct TransparencyLogError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What failed. Compare with the static members, for example ``Code/inclusionProofInvalid``.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Backing: String, Hashable, Sendable, CaseIterable {
            case indexOutOfRange = "log_index_out_of_range"
            case inclusionProofInvalid = "log_inclusion_proof_invalid"
            case consistencyProofInvalid = "log_consistency_proof_invalid"
            case checkpointMalformed = "log_checkpoint_malformed"
            case noteMalformed = "log_note_malformed"
            case noteKeyMalformed = "log_note_key_malformed"
            case noteSignatureMissing = "log_note_signature_missing"
            case noteSignatureInvalid = "log_note_signature_invalid"
        }

        fileprivate let backing: Backing

        fileprivate init(_ backing: Backing) {
            self.backing = backing
        }

        /// Every code of the module.
        public static var allCases: [Code] { Backing.allCases.map(Code.init) }

        /// The stable `snake_case` identifier, such as `log_inclusion_proof_invalid`.
        public var identifier: String { self.backing.rawValue }

        public var description: String { self.backing.rawValue }

        /// A leaf index or tree size outside the tree (an index at or past the size, a first size
        /// above the second, a size past 2⁶³ − 1).
        public static let indexOutOfRange = Code(.indexOutOfRange)
        /// An inclusion proof that does not lead from the leaf to the root (wrong length, a hash
        /// of the wrong size, a hash that does not match).
        public static let inclusionProofInvalid = Code(.inclusionProofInvalid)
        /// A consistency proof that does not show the second tree extends the first.
        public static let consistencyProofInvalid = Code(.consistencyProofInvalid)
        /// A checkpoint body that is not in the C2SP tlog-checkpoint format.
        public static let checkpointMalformed = Code(.checkpointMalformed)
        /// A note that is not in the C2SP signed-note format.
        public static let noteMalformed = Code(.noteMalformed)
        /// A signer or verifier key string that is not in the C2SP signed-note key format.
        public static let noteKeyMalformed = Code(.noteKeyMalformed)
        /// A note with no signature by the expected key.
        public static let noteSignatureMissing = Code(.noteSignatureMissing)
        /// A note whose signature line names the expected key but does not verify.
        public static let noteSignatureInvalid = Code(.noteSignatureInvalid)
    }

    /// What failed.
    public let code: Code
    /// Why, in words meant for a log or an operator.
    public let reason: String

    /// Creates an error.
    public init(code: Code, reason: String) {
        self.code = code
        self.reason = reason
    }

    public var description: String { "\(self.code.identifier): \(self.reason)" }

    public static func == (lhs: TransparencyLogError, rhs: TransparencyLogError) -> Bool { lhs.code == rhs.code }

    public func hash(into hasher: inout Hasher) { hasher.combine(self.code) }
}
