//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Foundation
import Testing
import TransparencyLog

// The keys, text and signatures: golang.org/x/mod's sumdb/note/note_test.go (BSD-3-Clause), the
// reference implementation of the C2SP signed-note format.
enum GoNoteVectors {
    static let peterSigner = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
    static let peterVerifier = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
    static let enochVerifier = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
    static let text = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
    static let peterSignature =
        "\u{2014} PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
    static let enochSignature =
        "\u{2014} EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n"
}

struct SignedNoteTests {
    @Test("Go's signer signs its text to the very note Go wrote (Ed25519 is deterministic)")
    func signMatchesGo() throws {
        let signer = try NoteSigner(keyString: GoNoteVectors.peterSigner)
        #expect(signer.verifierKey == GoNoteVectors.peterVerifier)
        #expect(signer.privateKeyString == GoNoteVectors.peterSigner)
        let note = try SignedNote.sign(text: GoNoteVectors.text, with: signer)
        #expect(note == GoNoteVectors.text + "\n" + GoNoteVectors.peterSignature)
    }

    @Test("a note signed by two keys opens with either verifier")
    func openCosigned() throws {
        let note = Array((GoNoteVectors.text + "\n" + GoNoteVectors.peterSignature + GoNoteVectors.enochSignature).utf8)
        #expect(try SignedNote.open(note, verifier: NoteVerifier(keyString: GoNoteVectors.peterVerifier)) == GoNoteVectors.text)
        #expect(try SignedNote.open(note, verifier: NoteVerifier(keyString: GoNoteVectors.enochVerifier)) == GoNoteVectors.text)
    }

    @Test("a note without the verifier's signature is refused as missing")
    func missingSignature() throws {
        let note = Array((GoNoteVectors.text + "\n" + GoNoteVectors.enochSignature).utf8)
        #expect(throws: TransparencyLogError(code: .noteSignatureMissing, reason: "")) {
            try SignedNote.open(note, verifier: NoteVerifier(keyString: GoNoteVectors.peterVerifier))
        }
    }

    @Test("one changed byte of the text or the signature is refused")
    func tampered() throws {
        let verifier = try NoteVerifier(keyString: GoNoteVectors.peterVerifier)
        let changedText = GoNoteVectors.text.replacingOccurrences(of: "answer", with: "Answer")
        #expect(throws: TransparencyLogError(code: .noteSignatureInvalid, reason: "")) {
            try SignedNote.open(Array((changedText + "\n" + GoNoteVectors.peterSignature).utf8), verifier: verifier)
        }
        // "…JnAM=" → "…JnAA=": the signature's last byte, still canonical base64.
        let changedSignature = GoNoteVectors.peterSignature.replacingOccurrences(of: "JnAM=", with: "JnAA=")
        #expect(throws: TransparencyLogError(code: .noteSignatureInvalid, reason: "")) {
            try SignedNote.open(Array((GoNoteVectors.text + "\n" + changedSignature).utf8), verifier: verifier)
        }
    }

    static let malformedNotes: [(String, String)] = {
        let text = GoNoteVectors.text
        let peter = GoNoteVectors.peterSignature
        var notes: [(String, String)] = []
        notes.append(("no signatures", text))
        notes.append(("a blank line, no signatures", text + "\n"))
        notes.append(("no final newline", text + "\n" + String(peter.dropLast())))
        notes.append(("a control character first", "\u{01}" + text + "\n" + peter))
        notes.append(("a name with a space", text + "\n" + peter.replacingOccurrences(of: "PeterNeumann", with: "Bad Name")))
        notes.append(("an unexpected line", text + "\n" + peter + "Unexpected line.\n"))
        notes.append(("a hyphen for the em dash", text + "\n" + peter.replacingOccurrences(of: "\u{2014}", with: "-")))
        notes.append(("unpadded base64", text + "\n" + peter.replacingOccurrences(of: "=\n", with: "\n")))
        notes.append(("101 signatures", text + "\n" + String(repeating: peter, count: 101)))
        return notes
    }()

    @Test("malformed notes are refused as malformed", arguments: Self.malformedNotes)
    func malformed(_ name: String, _ note: String) throws {
        let verifier = try NoteVerifier(keyString: GoNoteVectors.peterVerifier)
        #expect(throws: TransparencyLogError(code: .noteMalformed, reason: "")) {
            try SignedNote.open(Array(note.utf8), verifier: verifier)
        }
    }

    @Test("a note that is not UTF-8 is refused as malformed")
    func invalidUTF8() throws {
        let note = [0xFF] + Array((GoNoteVectors.text + "\n" + GoNoteVectors.peterSignature).utf8)
        #expect(throws: TransparencyLogError(code: .noteMalformed, reason: "")) {
            try SignedNote.open(note, verifier: NoteVerifier(keyString: GoNoteVectors.peterVerifier))
        }
    }

    @Test("every one-character change and every truncation of a key string is refused")
    func keyManglings() throws {
        let readers: [(String, (String) throws(TransparencyLogError) -> Void)] = [
            (GoNoteVectors.peterVerifier, { (text: String) throws(TransparencyLogError) in _ = try NoteVerifier(keyString: text) }),
            (GoNoteVectors.peterSigner, { (text: String) throws(TransparencyLogError) in _ = try NoteSigner(keyString: text) }),
        ]
        for (key, make) in readers {
            try make(key)
            let bytes = Array(key.utf8)
            for index in bytes.indices {
                var changed = bytes
                changed[index] &+= 1
                #expect(throws: TransparencyLogError.self, "byte \(index)") { try make(String(decoding: changed, as: UTF8.self)) }
                #expect(throws: TransparencyLogError.self, "first \(index)") { try make(String(decoding: bytes[..<index], as: UTF8.self)) }
            }
        }
    }

    @Test("a note signed here opens here, and its text is checked before signing")
    func roundTrip() throws {
        let signer = try NoteSigner(name: "formattest.example/log", seed: Array(repeating: 7, count: 32))
        let verifier = try NoteVerifier(keyString: signer.verifierKey)
        let note = try SignedNote.sign(text: "line one\nline two\n", with: signer)
        #expect(try SignedNote.open(Array(note.utf8), verifier: verifier) == "line one\nline two\n")
        for text in ["", "no newline", "a\n\nblank line\n", "tab\tinside\n"] {
            #expect(throws: TransparencyLogError(code: .noteMalformed, reason: ""), "\(text.debugDescription)") {
                try SignedNote.sign(text: text, with: signer)
            }
        }
        #expect(throws: TransparencyLogError(code: .noteKeyMalformed, reason: "")) {
            try NoteSigner(name: "has+plus", seed: Array(repeating: 7, count: 32))
        }
        #expect(throws: TransparencyLogError(code: .noteKeyMalformed, reason: "")) {
            try NoteSigner(name: "short-seed", seed: Array(repeating: 7, count: 31))
        }
    }
}

struct CheckpointTests {
    static let root = (0..<32).map { UInt8($0) }

    @Test("a checkpoint's body is written and read back, with extension lines")
    func roundTrip() throws {
        let checkpoint = try Checkpoint(origin: "formattest.example/evidence", size: 1_234, rootHash: Self.root, extensions: ["ext one"])
        #expect(checkpoint.body == "formattest.example/evidence\n1234\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\next one\n")
        #expect(try Checkpoint(body: Array(checkpoint.body.utf8)) == checkpoint)
        let empty = try Checkpoint(origin: "o", size: 0, rootHash: MerkleHash.emptyRoot)
        #expect(try Checkpoint(body: Array(empty.body.utf8)) == empty)
    }

    @Test(
        "one change to a good body is refused",
        arguments: [
            ("no final newline", "o\n5\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="),
            ("two lines", "o\n5\n"),
            ("an empty origin", "\n5\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n"),
            ("a space in the origin", "o o\n5\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n"),
            ("a plus in the origin", "o+o\n5\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n"),
            ("a leading zero", "o\n05\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n"),
            ("a sign", "o\n+5\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n"),
            ("a size past 2⁶³ − 1", "o\n9223372036854775808\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n"),
            ("a size of 20 digits", "o\n18446744073709551616\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n"),
            ("an empty size", "o\n\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n"),
            ("unpadded base64", "o\n5\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8\n"),
            ("base64url", "o\n5\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh-=\n"),
            ("set bits past the end", "o\n5\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh9=\n"),
            ("a 31-byte root", "o\n5\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHg==\n"),
            ("a carriage return", "o\n5\r\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n"),
            ("an empty extension line", "o\n5\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n\n"),
        ])
    func malformed(_ name: String, _ body: String) {
        #expect(throws: TransparencyLogError(code: .checkpointMalformed, reason: "")) {
            try Checkpoint(body: Array(body.utf8))
        }
    }

    @Test("a signed checkpoint: the body signed as a note, opened and read back")
    func signed() throws {
        let signer = try NoteSigner(name: "formattest.example/evidence", seed: Array(repeating: 9, count: 32))
        let checkpoint = try Checkpoint(origin: signer.name, size: 8, rootHash: try RFC6962Vectors.root(8))
        let note = try SignedNote.sign(text: checkpoint.body, with: signer)
        let text = try SignedNote.open(Array(note.utf8), verifier: NoteVerifier(keyString: signer.verifierKey))
        #expect(try Checkpoint(body: Array(text.utf8)) == checkpoint)
    }
}
