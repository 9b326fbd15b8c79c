//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttestSimulator
import CanonicalJSON
import FormAttestEvidence
import FormAttestTestSupport
import FormAttestTokens
import Foundation
import SwiftASN1
import Testing
import X509

/// Records written once and kept (Tests/Fixtures/evidence, provenance in its PROVENANCE.md): a
/// version-1 and a version-2 record (with its key registration) as the service wrote them before
/// passkeys, and the two version-3 records, each with the simulated roots and the server's JWKS
/// they verify with. They verify at their recorded times whatever today's date: a reader that
/// stops taking a record it once wrote fails here.
struct EvidenceFixtureTests {
    static let directory = repositoryDirectory.appendingPathComponent("Tests/Fixtures/evidence")

    static func read(_ name: String) throws -> [UInt8] { try Array(Data(contentsOf: Self.directory.appendingPathComponent(name))) }

    static func certificate(_ name: String) throws -> Certificate {
        try Certificate(pemEncoded: String(decoding: try Self.read(name), as: UTF8.self))
    }

    static func verify(_ name: String, registration: String? = nil) async throws -> SignedEvidence.Verified {
        var registrations: EvidenceRecord.RegistrationResolver?
        if let registration {
            let document = try Self.read(registration)
            registrations = { _ in document }
        }
        return try await SignedEvidence.verify(
            try Self.read(name), signers: try SignedEvidence.signers(jwks: try Self.read("jwks.json")),
            trustAnchors: [try Self.certificate("app-attest-root.pem")], receiptTrustAnchors: [try Self.certificate("receipt-root.pem")],
            registrations: registrations)
    }

    @Test("the kept records of every version verify at their recorded times: 1 and 2 (App Attest), 3 (a passkey alone, both factors)")
    func keptRecordsVerify() async throws {
        let first = try await Self.verify("v1-assertion.json")
        #expect(first.record.version == 1 && first.record.kind == .assertion && first.record.passkey == nil)
        let second = try await Self.verify("v2-assertion.json", registration: "v2-registration.json")
        #expect(second.record.version == 2 && second.record.format == .referencingRegistration && second.record.passkey == nil)
        let alone = try await Self.verify("v3-passkey.json")
        #expect(alone.record.version == 3 && alone.record.kind == .passkey && alone.record.passkey != nil)
        let both = try await Self.verify("v3-both.json")
        #expect(both.record.version == 3 && both.record.kind == .assertion && both.record.passkey != nil)
        // The version-2 record without its registration is refused, naming what is missing.
        await #expect(throws: EvidenceError(code: .registrationMissing, reason: "")) { _ = try await Self.verify("v2-assertion.json") }
    }

    @Test("the kept records validate against schemas/evidence-record.schema.json (jsonschema), and each one-change violation does not")
    func schema() async throws {
        let interop = try PythonCheck(venv: ".venv-interop", overrideVariable: "FORMATTEST_INTEROP_PYTHON")
        let check = try await interop.run(
            "e2e/interop/evidence_schema.py",
            ["schemas/evidence-record.schema.json", Self.directory.path].map {
                $0.hasPrefix("/") ? $0 : repositoryDirectory.appendingPathComponent($0).path
            })
        #expect(check.status == 0, "\(check.output)")
        #expect(check.output.contains("17 passed, 0 failed"), "\(check.output)")
    }

    /// Writes the fixtures (FORMATTEST_WRITE_EVIDENCE_FIXTURES=1), then reads them back through
    /// the verifier. Run once when a version is added; the kept files are never rewritten for an
    /// existing version.
    @Test(
        "write the kept records (only with FORMATTEST_WRITE_EVIDENCE_FIXTURES=1)",
        .enabled(if: ProcessInfo.processInfo.environment["FORMATTEST_WRITE_EVIDENCE_FIXTURES"] == "1"))
    func write() async throws {
        let passkeys = try PasskeyEvidenceTests()
        let base = passkeys.base
        try FileManager.default.createDirectory(at: Self.directory, withIntermediateDirectories: true)
        func write(_ bytes: [UInt8], _ name: String) throws {
            try Data(bytes).write(to: Self.directory.appendingPathComponent(name), options: .withoutOverwriting)
        }
        try write(SigningKeys(current: base.serverKey).jwks.canonicalBytes + [0x0A], "jwks.json")
        try write(Array(try base.authority.rootCertificate.serializeAsPEM().pemString.utf8) + [0x0A], "app-attest-root.pem")
        try write(Array(try base.authority.receiptAuthority.rootCertificate.serializeAsPEM().pemString.utf8) + [0x0A], "receipt-root.pem")
        let assertion = try base.assertionRecord()
        try write(try SignedEvidence.sign(assertion, with: base.serverKey).bytes, "v1-assertion.json")
        var referencing = assertion
        referencing.format = .referencingRegistration
        try write(try SignedEvidence.sign(referencing, with: base.serverKey).bytes, "v2-assertion.json")
        try write(KeyRegistration(of: referencing).bytes, "v2-registration.json")
        try write(try SignedEvidence.sign(try passkeys.passkeyRecord(), with: base.serverKey).bytes, "v3-passkey.json")
        try write(try SignedEvidence.sign(try passkeys.bothRecord(), with: base.serverKey).bytes, "v3-both.json")
        #expect(try await Self.verify("v1-assertion.json").record == assertion)
    }
}
