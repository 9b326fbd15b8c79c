//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// The rule for a username, wherever one crosses a trust boundary (request bodies, query strings,
/// the CLI) and again at the flows' entry: 1 to 256 bytes of UTF-8 with no control characters.
///
/// Control characters (Unicode category Cc: U+0000–U+001F, U+007F–U+009F) are refused because
/// what follows does not treat them alike: SQLite's text binding ends a string at NUL, so
/// `alice\0evil` would be stored as `alice`; logs and terminals interpret the rest. Any other
/// text is kept and compared byte for byte: usernames that differ only in Unicode normalization
/// are different users (normalizing is the identity provider's business, not ours).
public enum Username {
    /// The longest username accepted, in UTF-8 bytes.
    public static let maximumLength = 256

    /// Why `username` is refused, or `nil` when it is acceptable.
    public static func problem(_ username: some StringProtocol) -> String? {
        let length = username.utf8.count
        guard length > 0, length <= Self.maximumLength else {
            return "username must be 1 to \(Self.maximumLength) bytes"
        }
        if username.unicodeScalars.contains(where: { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }) {
            return "username must not contain control characters"
        }
        return nil
    }
}
