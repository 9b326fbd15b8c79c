//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestTestSupport
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `formattest wrap --batch` at scale, through the real binaries: the pipeline over every core
/// keeps the input's order and today's verdicts, every output mode gives the same tokens, a run
/// killed with SIGKILL resumes (every line done exactly once), a torn last record is done again,
/// a damaged or foreign output is refused untouched, memory does not grow with the input, and the
/// progress line appears on a terminal only.
///
/// The inputs come from `formattest-dev simulate batch-input` at the real now (its root from
/// `simulate root`); their `at` is pinned in each line, so the FIDO2 wrapper is deterministic.
struct BatchScaleTests {
    struct Batch {
        let files: TemporaryFiles
        let input: String
        let lines: [String]
        /// `--root` and `--data-dir` for every run.
        let options: [String]
    }

    /// `count` simulated lines (`formats`), then `edit` applied to them.
    static func batch(count: Int, formats: [String], edit: (inout [String]) -> Void = { _ in }) async throws -> Batch {
        let files = try TemporaryFiles()
        let raw = files.directory.appendingPathComponent("raw.jsonl").path
        let generated = try await Formattest.run(
            ["simulate", "batch-input", "--count", "\(count)", "--keys", "4", "--out", raw] + formats.flatMap { ["--format", $0] }
        )
        try #require(generated.status == 0, "\(generated.stderr)")
        var lines = try String(contentsOfFile: raw, encoding: .utf8).split(separator: "\n").map(String.init)
        try #require(lines.count == count)
        edit(&lines)
        let input = try files.write(lines.joined(separator: "\n") + "\n", named: "in.jsonl")
        let root = try await Formattest.run(["simulate", "root"])
        try #require(root.status == 0)
        let rootPath = try files.write(root.stdout, named: "root.pem")
        let data = files.directory.appendingPathComponent("data").path
        if formats.contains("jws") {
            let generatedKey = try await Formattest.run(["keys", "generate", "--data-dir", data])
            try #require(generatedKey.status == 0, "\(generatedKey.stderr)")
        }
        return Batch(files: files, input: input, lines: lines, options: ["--root", rootPath, "--data-dir", data])
    }

    /// The records of a `--out` file or stdout, as lines.
    static func records(_ text: String) -> [String] {
        text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init).filter { !$0.isEmpty }
    }

    static func object(_ line: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
    }

    /// A record's tokens exactly as written (the last member, spliced in as RFC 8785 bytes).
    static func tokens(_ record: String) -> String? {
        guard let range = record.range(of: #","tokens":"#) else { return nil }
        return String(record[range.upperBound...].dropLast())
    }

    /// The tokens with the JWS (if any) replaced by its header and its claims but `jti`: what
    /// must be identical across output modes. Returns the `jti` and the signature apart.
    static func normalized(_ tokens: String) throws -> (text: String, random: [String]) {
        guard let start = tokens.range(of: #""serverAttestation":""#) else { return (tokens, []) }
        let rest = tokens[start.upperBound...]
        let end = try #require(rest.firstIndex(of: "\""))
        let parts = rest[..<end].split(separator: ".").map(String.init)
        try #require(parts.count == 3)
        let payload = try #require(Self.base64url(parts[1]))
        var claims = try #require(try JSONSerialization.jsonObject(with: payload) as? [String: Any])
        let jti = try #require(claims.removeValue(forKey: "jti") as? String)
        let stable = String(decoding: try JSONSerialization.data(withJSONObject: claims, options: [.sortedKeys]), as: UTF8.self)
        return (String(tokens[..<start.upperBound]) + parts[0] + "|" + stable + String(rest[end...]), [jti, parts[2]])
    }

    static func base64url(_ text: String) -> Data? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64)
    }

    static func visibleFiles(_ directory: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory).filter { !$0.hasPrefix(".") }.sorted()
    }

    @Test("--out FILE, --out - and --out-dir: input order, the same verdicts, the same tokens but the JWS's jti and signature")
    func everyOutputMode() async throws {
        let batch = try await Self.batch(count: 120, formats: ["fido2", "jws"]) { lines in
            lines.insert("", at: 9)  // line 10: blank, not an item
            lines[49] = "{not json"  // line 50
            // Line 80: a clientDataHash the attestation was not made over.
            lines[79] = lines[79].replacingOccurrences(of: #""clientDataHash":""#, with: #""clientDataHash":"00"#)
        }
        let lineNumbers = batch.lines.enumerated().filter { !$0.element.isEmpty }.map { $0.offset + 1 }
        let file = batch.files.directory.appendingPathComponent("out.jsonl").path
        let directory = batch.files.directory.appendingPathComponent("dir").path

        let toFile = try await Formattest.run(["wrap", "--batch", batch.input, "--out", file] + batch.options)
        let toStdout = try await Formattest.run(["wrap", "--batch", batch.input, "--out", "-"] + batch.options)
        let toDirectory = try await Formattest.run(["wrap", "--batch", batch.input, "--out-dir", directory] + batch.options)
        for run in [toFile, toStdout, toDirectory] { #expect(run.status == 1, "\(run.stderr)") }

        // The summary is the same (on stderr when stdout carries the records).
        let summary = try Self.object(toFile.stdout)
        #expect(summary["total"] as? Int == lineNumbers.count)
        #expect(summary["wrapped"] as? Int == lineNumbers.count - 2)
        #expect(summary["failed"] as? Int == 2)
        let failures = try #require(summary["failures"] as? [[String: Any]])
        #expect(failures.map { $0["item"] as? String } == ["line 50", "line 80"])
        #expect(failures.first?["code"] as? String == "invalid_request")
        #expect(failures.last?["code"] as? String != "invalid_request")
        for other in [try Self.object(toStdout.stderr), try Self.object(toDirectory.stdout)] {
            #expect(other["total"] as? Int == summary["total"] as? Int)
            #expect(other["wrapped"] as? Int == summary["wrapped"] as? Int)
            #expect((other["failures"] as? [[String: Any]])?.map { $0["code"] as? String } == failures.map { $0["code"] as? String })
        }

        // One record per item, in input order, with the line's identity.
        let fileRecords = Self.records(try String(contentsOfFile: file, encoding: .utf8))
        let stdoutRecords = Self.records(toStdout.stdout)
        #expect(fileRecords.count == lineNumbers.count)
        #expect(try fileRecords.map { try Self.object($0)["line"] as? Int } == lineNumbers)
        #expect(try stdoutRecords.map { try Self.object($0)["line"] as? Int } == lineNumbers)
        #expect(try fileRecords.map { try Self.object($0)["input"] as? String } == stdoutRecords.map { try Self.object($0)["input"] as? String })

        // The same tokens in every mode, byte for byte, but the JWS's jti and ECDSA signature,
        // random by design (and seen to differ).
        var randomDiffers = 0
        for (fileRecord, stdoutRecord) in zip(fileRecords, stdoutRecords) {
            let record = try Self.object(fileRecord)
            guard let tokens = Self.tokens(fileRecord) else {
                #expect(record["error"] != nil)
                #expect(Self.tokens(stdoutRecord) == nil)
                continue
            }
            let name = try #require(record["name"] as? String)
            let fromStdout = try Self.normalized(try #require(Self.tokens(stdoutRecord)))
            let fromDirectory = try Self.normalized(try String(contentsOfFile: directory + "/\(name).json", encoding: .utf8))
            let fromFile = try Self.normalized(tokens)
            #expect(fromFile.text == fromStdout.text)
            #expect(fromFile.text == fromDirectory.text)
            #expect(fromFile.text.contains(#""fido2Wrapper":{"#))
            if fromFile.random[0] != fromStdout.random[0] && fromFile.random[1] != fromDirectory.random[1] { randomDiffers += 1 }
        }
        #expect(randomDiffers == lineNumbers.count - 2)
        #expect(try Self.visibleFiles(directory).count == lineNumbers.count - 2)
    }

    @Test(
        "kill -9 halfway, then the same command: every line done exactly once, the outputs those of an uninterrupted run",
        arguments: ["out", "out-dir"])
    func resumeAfterKill(mode: String) async throws {
        let count = 400
        let batch = try await Self.batch(count: count, formats: ["fido2"])
        let reference = batch.files.directory.appendingPathComponent("reference").path
        let output = batch.files.directory.appendingPathComponent("output").path
        let flag = mode == "out" ? "--out" : "--out-dir"
        let clean = try await Formattest.run(["wrap", "--batch", batch.input, flag, reference] + batch.options)
        #expect(clean.status == 0, "\(clean.stderr)")

        // Killed once some records are out (for --out-dir: once the journal has some).
        let watched = mode == "out" ? output : output + "/.formattest-batch.jsonl"
        let running = try Formattest.start(["wrap", "--batch", batch.input, flag, output] + batch.options)
        var seen = 0
        let deadline = Date().addingTimeInterval(300)
        while running.process.isRunning && Date() < deadline {
            seen = (try? String(contentsOfFile: watched, encoding: .utf8))?.filter { $0 == "\n" }.count ?? 0
            if seen >= 20 { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        kill(running.process.processIdentifier, SIGKILL)
        let killed = await running.finish()
        try #require(running.process.terminationReason == .uncaughtSignal, "the run ended before it was killed: \(killed.stdout)")
        let before = (try? String(contentsOfFile: watched, encoding: .utf8))?.filter { $0 == "\n" }.count ?? 0
        #expect(before < count)

        let resumed = try await Formattest.run(["wrap", "--batch", batch.input, flag, output] + batch.options)
        #expect(resumed.status == 0, "\(resumed.stderr)")
        let summary = try Self.object(resumed.stdout)
        #expect(summary["total"] as? Int == count)
        #expect(summary["wrapped"] as? Int == count)
        #expect(summary["resumed"] as? Int == before)
        #expect((summary["resumed"] as? Int ?? count) < count)

        if mode == "out" {
            // Byte for byte the uninterrupted run's records: each line once, in order.
            #expect(try String(contentsOfFile: output, encoding: .utf8) == String(contentsOfFile: reference, encoding: .utf8))
        } else {
            let names = try Self.visibleFiles(output)
            #expect(names == (try Self.visibleFiles(reference)))
            #expect(names.count == count)
            for name in names {
                #expect(
                    FileManager.default.contents(atPath: output + "/" + name) == FileManager.default.contents(atPath: reference + "/" + name),
                    "\(name)"
                )
            }
            let journal = Self.records(try String(contentsOfFile: output + "/.formattest-batch.jsonl", encoding: .utf8))
            #expect(try journal.map { try Self.object($0)["line"] as? Int } == Array(1...count))
            #expect(!FileManager.default.fileExists(atPath: output + "/.formattest-staging"))
        }
    }

    @Test("a torn last record is done again; a damaged record, another input or a changed file is refused and nothing changes")
    func tornAndRefused() async throws {
        let batch = try await Self.batch(count: 40, formats: ["fido2"])
        let reference = batch.files.directory.appendingPathComponent("reference.jsonl").path
        let clean = try await Formattest.run(["wrap", "--batch", batch.input, "--out", reference] + batch.options)
        #expect(clean.status == 0, "\(clean.stderr)")
        let complete = try #require(FileManager.default.contents(atPath: reference))
        let records = Self.records(String(decoding: complete, as: UTF8.self))
        try #require(records.count == 40)

        // Torn: 30 whole records and half of the 31st.
        let torn = batch.files.directory.appendingPathComponent("torn.jsonl").path
        let keep = records[0..<30].map { $0 + "\n" }.joined() + String(records[30].prefix(records[30].count / 2))
        try Data(keep.utf8).write(to: URL(fileURLWithPath: torn))
        let again = try await Formattest.run(["wrap", "--batch", batch.input, "--out", torn] + batch.options)
        #expect(again.status == 0, "\(again.stderr)")
        #expect(try Self.object(again.stdout)["resumed"] as? Int == 30)
        #expect(FileManager.default.contents(atPath: torn) == complete)

        // A complete file: nothing to do, nothing written.
        let nothing = try await Formattest.run(["wrap", "--batch", batch.input, "--out", torn] + batch.options)
        #expect(nothing.status == 0)
        #expect(try Self.object(nothing.stdout)["resumed"] as? Int == 40)
        #expect(FileManager.default.contents(atPath: torn) == complete)

        // Damaged: a bad record with records after it.
        let damaged = batch.files.directory.appendingPathComponent("damaged.jsonl").path
        var damagedRecords = records[0..<10].map { $0 + "\n" }
        damagedRecords[4] = "{\"line\":5,\"inp\n"
        let damagedBytes = Data(damagedRecords.joined().utf8)
        try damagedBytes.write(to: URL(fileURLWithPath: damaged))
        let refused = try await Formattest.run(["wrap", "--batch", batch.input, "--out", damaged] + batch.options)
        #expect(refused.status == 2)
        #expect(refused.stderr.contains("line 5 is not a batch record and more follow it"), "\(refused.stderr)")
        #expect(FileManager.default.contents(atPath: damaged) == damagedBytes)

        // Another input over this output: its third line differs.
        var otherLines = batch.lines
        otherLines[2] = otherLines[3]
        let otherInput = try batch.files.write(otherLines.joined(separator: "\n") + "\n", named: "other.jsonl")
        let other = try await Formattest.run(["wrap", "--batch", otherInput, "--out", torn] + batch.options)
        #expect(other.status == 2)
        #expect(other.stderr.contains("was written for another input"), "\(other.stderr)")
        #expect(FileManager.default.contents(atPath: torn) == complete)

        // --out-dir: a file changed after its journal record is refused, not trusted.
        let directory = batch.files.directory.appendingPathComponent("dir").path
        let first = try await Formattest.run(["wrap", "--batch", batch.input, "--out-dir", directory] + batch.options)
        #expect(first.status == 0, "\(first.stderr)")
        let changed = directory + "/item-7.json"
        try Data("{}".utf8).write(to: URL(fileURLWithPath: changed))
        let journal = try #require(FileManager.default.contents(atPath: directory + "/.formattest-batch.jsonl"))
        let refusedDirectory = try await Formattest.run(["wrap", "--batch", batch.input, "--out-dir", directory] + batch.options)
        #expect(refusedDirectory.status == 2)
        #expect(refusedDirectory.stderr.contains("item-7.json is not the file the journal recorded for line 7"), "\(refusedDirectory.stderr)")
        #expect(FileManager.default.contents(atPath: directory + "/.formattest-batch.jsonl") == journal)
        #expect(FileManager.default.contents(atPath: changed) == Data("{}".utf8))

        // A file that was there before the batch is never replaced: its line fails with `exists`.
        let fresh = batch.files.directory.appendingPathComponent("fresh").path
        try FileManager.default.createDirectory(atPath: fresh, withIntermediateDirectories: true)
        try Data("mine".utf8).write(to: URL(fileURLWithPath: fresh + "/item-3.json"))
        let beside = try await Formattest.run(["wrap", "--batch", batch.input, "--out-dir", fresh] + batch.options)
        #expect(beside.status == 1)
        let besideSummary = try Self.object(beside.stdout)
        #expect(besideSummary["wrapped"] as? Int == 39)
        #expect((besideSummary["failures"] as? [[String: Any]])?.map { $0["code"] as? String } == ["exists"])
        #expect(FileManager.default.contents(atPath: fresh + "/item-3.json") == Data("mine".utf8))
    }

    /// Peak resident memory of a child, from `/usr/bin/time -v`, in KiB.
    static func peakKilobytes(_ arguments: [String], executable: URL) throws -> (kilobytes: Int, stdout: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/time")
        process.arguments = ["-v", executable.path] + arguments
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        // The child writes little to stderr (no terminal, so no progress): reading the pipes one
        // after the other cannot block it.
        let stdout = output.fileHandleForReading.readDataToEndOfFile()
        let stderr = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        let line = try #require(stderr.split(separator: "\n").first { $0.contains("Maximum resident set size (kbytes):") })
        let value = try #require(Int(line.split(separator: ":").last?.trimmingCharacters(in: .whitespaces) ?? ""))
        return (value, String(decoding: stdout, as: UTF8.self))
    }

    @Test("peak memory does not grow with the input: 2,000 and 20,000 lines of 2 KB, every one failing")
    func boundedMemory() async throws {
        let files = try TemporaryFiles()
        // Lines that reach the pipeline's workers and fail there (the attestation is not base64):
        // the same path as any line, at a fraction of a verification's cost.
        func input(_ count: Int) throws -> String {
            let padding = String(repeating: "A", count: 2000)
            var text = ""
            text.reserveCapacity(count * 2100)
            for number in 1...count {
                text += #"{"name":"n\#(number)","attestation":"!\#(padding)","keyId":"AA","appId":"a","clientDataHash":"00"}"# + "\n"
            }
            return try files.write(text, named: "in-\(count).jsonl")
        }
        var peaks: [Int: Int] = [:]
        for count in [2000, 20_000] {
            let out = files.directory.appendingPathComponent("out-\(count).jsonl").path
            let (peak, stdout) = try Self.peakKilobytes(["wrap", "--batch", try input(count), "--out", out], executable: Formattest.executable)
            let summary = try Self.object(stdout)
            #expect(summary["failed"] as? Int == count, "\(stdout.prefix(300))")
            #expect((summary["failures"] as? [Any])?.count == 1000)
            #expect(summary["failuresNotListed"] as? Int == count - 1000)
            peaks[count] = peak
        }
        // Ten times the input (about 38 MB more) moves the peak by less than 16 MB.
        let small = try #require(peaks[2000])
        let large = try #require(peaks[20_000])
        #expect(large - small < 16 * 1024, "peak RSS \(small) KiB at 2,000 lines, \(large) KiB at 20,000")
    }

    @Test(
        "a line's base64 is decoded from its JSON string's bytes as single mode decodes text: ASCII whitespace and U+2028 ignored, U+00E9 refused"
    )
    func base64WhitespaceInLines() async throws {
        // The same separator inside each line's attestation, after its 64th character; line 3's
        // differs from line 2's in that one scalar (U+00E9 is not whitespace).
        let separators = [#"\n \t"#, "\u{2028}", "\u{00E9}"]
        let plain = try await Self.batch(count: 3, formats: ["fido2"])
        var spacedLines = plain.lines
        for index in spacedLines.indices {
            let range = try #require(spacedLines[index].range(of: #""attestation":""#))
            let at = spacedLines[index].index(range.upperBound, offsetBy: 64)
            spacedLines[index] = String(spacedLines[index][..<at]) + separators[index] + String(spacedLines[index][at...])
        }
        let spacedInput = try plain.files.write(spacedLines.joined(separator: "\n") + "\n", named: "spaced.jsonl")
        let plainOut = plain.files.directory.appendingPathComponent("plain-out.jsonl").path
        let spacedOut = plain.files.directory.appendingPathComponent("spaced-out.jsonl").path
        let plainRun = try await Formattest.run(["wrap", "--batch", plain.input, "--out", plainOut] + plain.options)
        let spacedRun = try await Formattest.run(["wrap", "--batch", spacedInput, "--out", spacedOut] + plain.options)
        #expect(plainRun.status == 0, "\(plainRun.stderr)")
        #expect(spacedRun.status == 1, "\(spacedRun.stderr)")
        let plainRecords = Self.records(try String(contentsOfFile: plainOut, encoding: .utf8))
        let spacedRecords = Self.records(try String(contentsOfFile: spacedOut, encoding: .utf8))
        try #require(plainRecords.count == 3 && spacedRecords.count == 3)
        // Lines 1 and 2: the very tokens of the lines without separators (`at` is pinned).
        for index in 0..<2 {
            #expect(Self.tokens(spacedRecords[index]) != nil)
            #expect(Self.tokens(spacedRecords[index]) == Self.tokens(plainRecords[index]), "line \(index + 1)")
        }
        // Line 3: refused as not base64, its neighbours unaffected.
        let refused = try Self.object(spacedRecords[2])
        let error = try #require(refused["error"] as? [String: Any])
        #expect(error["code"] as? String == "invalid_request")
        #expect((error["message"] as? String)?.contains("attestation is not base64 or base64url") == true, "\(error)")
        #expect(Self.tokens(plainRecords[2]) != nil)
    }

    @Test("progress is drawn on a terminal's stderr only")
    func progressOnTerminal() async throws {
        let batch = try await Self.batch(count: 30, formats: ["fido2"])
        let plainOut = batch.files.directory.appendingPathComponent("plain.jsonl").path
        let plain = try await Formattest.run(["wrap", "--batch", batch.input, "--out", plainOut] + batch.options)
        #expect(plain.status == 0)
        #expect(plain.stderr.isEmpty, "\(plain.stderr)")

        // `script` gives the child a terminal (stdout and stderr both go to it).
        let ttyOut = batch.files.directory.appendingPathComponent("tty.jsonl").path
        let command = ([Formattest.executable.path, "wrap", "--batch", batch.input, "--out", ttyOut] + batch.options).joined(separator: " ")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/script")
        process.arguments = ["-q", "-e", "-c", command, "/dev/null"]
        let output = Pipe()
        process.standardOutput = output
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "\(text)")
        #expect(text.contains("\r30 lines, "), "\(text)")
        #expect(text.contains("/s, 0 errors, 100%"), "\(text)")
        #expect(text.contains(#""total":30"#), "\(text)")
    }
}
