//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
import Crypto

/// One record of `wrap --batch`: the outcome of one input line, with that line's identity, so that
/// a rerun checks (never trusts) what an earlier run did.
///
/// It is one line of `--out FILE|-` (the tokens themselves) and of `--out-dir`'s journal,
/// `DIR/.formattest-batch.jsonl` (the file written and its SHA-256). Serialized with RFC 8785:
/// `{"error":{"code","message"}|"file"+"sha256"|"tokens", "input", "line", "name"}`.
struct BatchRecord: Equatable {
    enum Outcome: Equatable {
        /// `--out`: the tokens object, RFC 8785 bytes (what single mode prints).
        case tokens([UInt8])
        /// `--out-dir`: the file written (relative to the directory) and its SHA-256 (hex).
        case file(path: String, sha256: String)
        /// The line failed: its error code and message.
        case error(code: String, message: String)
    }

    /// The line's number in the input (1-based, counting every line, blank ones too).
    var line: Int
    /// The line's identity: the SHA-256 (hex) of its bytes (without the newline), or `nil` for a
    /// line longer than `--max-line-bytes` (never kept, so never hashed).
    var input: String?
    /// The item's name (`name`, else `item-<line>`), when the line parsed that far.
    var name: String?
    var outcome: Outcome

    /// The identity of a line's bytes.
    static func identity(of bytes: [UInt8]) -> String {
        HexCoding.encode(SHA256.hash(data: bytes))
    }

    /// The record as one JSON line (RFC 8785, then a newline).
    var bytes: [UInt8] {
        var members: [(name: String, value: JSONValue)] = [
            ("line", .number(Double(self.line))),
            ("input", self.input.map { .string(JSONString($0)) } ?? .null),
        ]
        if let name = self.name { members.append(("name", .string(JSONString(name)))) }
        switch self.outcome {
        case .tokens(let tokens):
            // "tokens" sorts after every other member: the tokens' own canonical bytes are spliced
            // in as the last member rather than parsed again (they are RFC 8785 already).
            var bytes = JSONValue.object(JSONObject(constantMembers: members)).canonicalBytes
            bytes.removeLast()  // "}"
            bytes += Array(#","tokens":"#.utf8) + tokens + [0x7D, 0x0A]
            return bytes
        case .file(let path, let sha256):
            members.append(("file", .string(JSONString(path))))
            members.append(("sha256", .string(JSONString(sha256))))
        case .error(let code, let message):
            members.append(
                (
                    "error", .object(JSONObject(constantMembers: [("code", .string(JSONString(code))), ("message", .string(JSONString(message)))]))
                ))
        }
        return JSONValue.object(JSONObject(constantMembers: members)).canonicalBytes + [0x0A]
    }

    /// Parses a record strictly; `nil` when the bytes are not one.
    init?(parsing bytes: [UInt8]) {
        guard let value = try? CanonicalJSON.parse(bytes, limits: .init(maximumSize: BatchRecordReader.maximumRecordBytes)),
            case .object(let object) = value,
            case .number(let number) = object["line"], let line = Int(exactly: number), line > 0
        else { return nil }
        self.line = line
        switch object["input"] {
        case .null: self.input = nil
        case .string(let text): self.input = text.string
        default: return nil
        }
        switch object["name"] {
        case nil: self.name = nil
        case .string(let text): self.name = text.string
        default: return nil
        }
        if let tokens = object["tokens"] {
            guard case .object = tokens, object["error"] == nil, object["file"] == nil else { return nil }
            self.outcome = .tokens(tokens.canonicalBytes)
        } else if let path = object["file"]?.stringValue, let sha256 = object["sha256"]?.stringValue {
            guard object["error"] == nil else { return nil }
            self.outcome = .file(path: path, sha256: sha256)
        } else if let code = object["error"]?["code"]?.stringValue, let message = object["error"]?["message"]?.stringValue {
            self.outcome = .error(code: code, message: message)
        } else {
            return nil
        }
    }

    init(line: Int, input: String?, name: String?, outcome: Outcome) {
        self.line = line
        self.input = input
        self.name = name
        self.outcome = outcome
    }
}
