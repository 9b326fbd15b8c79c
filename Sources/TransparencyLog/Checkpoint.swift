//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// A checkpoint in the C2SP tlog-checkpoint format: the body of a signed note that commits to a
/// log's first ``size`` leaves through their ``rootHash``.
///
/// ```
/// <origin>
/// <size, decimal>
/// <root hash, standard base64>
/// [<extension line>]...
/// ```
/// Every line ends with a newline. The origin names the log (a schema-less URL by convention) and
/// holds no Unicode space and no `+`; the size has no sign and no leading zero; extension lines
/// are not empty. The reader accepts exactly one spelling of each checkpoint.
public struct Checkpoint: Sendable, Equatable {
    public let origin: String
    public let size: UInt64
    public let rootHash: [UInt8]
    public let extensions: [String]

    /// The longest body read, in bytes.
    public static let maximumBodyLength = 4096

    public init(origin: String, size: UInt64, rootHash: [UInt8], extensions: [String] = []) throws(TransparencyLogError) {
        guard SignedNote.isValidName(origin) else {
            throw Self.malformed("the origin is empty or holds a space, a plus sign or a control character")
        }
        guard size <= MerkleProof.maximumSize else { throw Self.malformed("the size is past 2⁶³ − 1") }
        guard rootHash.count == MerkleHash.size else { throw Self.malformed("the root hash is not \(MerkleHash.size) bytes") }
        for line in extensions {
            guard !line.isEmpty, SignedNote.isValidText(line), !line.contains("\n") else {
                throw Self.malformed("an extension line is empty or holds a control character")
            }
        }
        self.origin = origin
        self.size = size
        self.rootHash = rootHash
        self.extensions = extensions
    }

    /// Reads a checkpoint body (the text of its signed note).
    public init(body: some Collection<UInt8>) throws(TransparencyLogError) {
        guard body.count <= Self.maximumBodyLength else { throw Self.malformed("the body is over \(Self.maximumBodyLength) bytes") }
        guard let text = String(validating: body, as: UTF8.self), text.hasSuffix("\n") else {
            throw Self.malformed("the body is not UTF-8 text ending in a newline")
        }
        let lines = text.dropLast().split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard lines.count >= 3 else { throw Self.malformed("the body has fewer than three lines") }
        guard let size = Self.decimal(lines[1]) else {
            throw Self.malformed("the size is not a decimal number without sign or leading zero")
        }
        guard let root = StrictBase64.decode(lines[2].utf8) else {
            throw Self.malformed("the root hash is not standard base64 with padding")
        }
        try self.init(origin: lines[0], size: size, rootHash: root, extensions: Array(lines.dropFirst(3)))
    }

    /// The body: the text a signed note over this checkpoint signs.
    public var body: String {
        var text = "\(self.origin)\n\(self.size)\n\(StrictBase64.encode(self.rootHash))\n"
        for line in self.extensions {
            text += line + "\n"
        }
        return text
    }

    private static func decimal(_ text: String) -> UInt64? {
        let digits = Array(text.utf8)
        guard !digits.isEmpty, digits.count <= 19, digits.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
            digits.count == 1 || digits[0] != UInt8(ascii: "0")
        else { return nil }
        var value: UInt64 = 0
        for digit in digits {
            value = value * 10 + UInt64(digit - UInt8(ascii: "0"))
        }
        return value
    }

    private static func malformed(_ reason: String) -> TransparencyLogError {
        TransparencyLogError(code: .checkpointMalformed, reason: reason)
    }
}
