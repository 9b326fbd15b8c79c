//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import CanonicalJSON
import Crypto
import FormAttestEvidence
import FormAttestForm
import Foundation
import Testing
import TransparencyLog

/// Version-2 records (issue 34): the key's attestation is referenced by the SHA-256 of its
/// registration document, which the reader fetches with a resolver and checks before every step
/// of version 1 runs on it unchanged.
struct KeyRegistrationTests {
    let records = try! EvidenceTests()

    /// A version-2 record, its registration document, and a resolver holding that document.
    static func referencing(_ record: EvidenceRecord) -> (record: EvidenceRecord, registration: [UInt8]) {
        var record = record
        record.format = .referencingRegistration
        return (record, KeyRegistration(of: record).bytes)
    }

    static func resolver(_ documents: [[UInt8]]) -> EvidenceRecord.RegistrationResolver {
        let byID = Dictionary(documents.map { (KeyRegistration.id(of: $0), $0) }, uniquingKeysWith: { first, _ in first })
        return { id in byID[id] }
    }

    func verify(_ bytes: [UInt8], registrations: EvidenceRecord.RegistrationResolver?) async throws(EvidenceError) -> SignedEvidence.Verified {
        try await SignedEvidence.verify(
            bytes, signers: self.records.signers, trustAnchors: self.records.anchors,
            receiptTrustAnchors: [self.records.authority.receiptAuthority.rootCertificate], registrations: registrations)
    }

    func expect(
        _ code: EvidenceError.Code, _ bytes: [UInt8], _ registrations: EvidenceRecord.RegistrationResolver?, _ comment: Comment,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async {
        do {
            _ = try await self.verify(bytes, registrations: registrations)
            Issue.record("accepted: \(comment)", sourceLocation: sourceLocation)
        } catch {
            #expect(error.code == code, "\(comment): \(error)", sourceLocation: sourceLocation)
        }
    }

    // MARK: - Accepted

    @Test("a version-2 record of each kind references its registration, verifies with a resolver and reads back equal")
    func roundTrip() async throws {
        for original in [try self.records.attestationRecord(), try self.records.assertionRecord(), try self.records.assertionRecord(kind: .pooled)] {
            let (record, registration) = Self.referencing(original)
            let payload = record.json
            #expect(payload["version"] == .number(2))
            #expect(payload["keyAttestation"] == nil)
            #expect(payload["keyRegistration"]?.stringValue == Base64URL.encode(SHA256.hash(data: registration)))
            #expect(try EvidenceRecord.registrationID(inPayload: payload.canonicalBytes) == KeyRegistration.id(of: registration))
            #expect(try EvidenceRecord.registrationID(inPayload: original.json.canonicalBytes) == nil)
            // The attestation is most of a version-1 record; version 2 drops it.
            #expect(payload.canonicalBytes.count < 3 * 1024 && original.json.canonicalBytes.count > 5 * 1024)

            let signed = try SignedEvidence.sign(record, with: self.records.serverKey)
            let verified = try await self.verify(signed.bytes, registrations: Self.resolver([registration]))
            #expect(verified.record == record)
            #expect(verified.record.keyAttestation == original.keyAttestation)
            #expect(verified.id == signed.id && signed.payload == payload.canonicalBytes)
            #expect(try EvidenceRecord(json: payload, registrations: Self.resolver([registration])).json.canonicalBytes == payload.canonicalBytes)
            // The document reads back equal, and its id is its bytes' digest.
            let document = try KeyRegistration(bytes: registration)
            #expect(document == KeyRegistration(of: record) && document.bytes == registration)
            #expect(document.id == Array(SHA256.hash(data: registration)))
        }
    }

    @Test("a version-1 record still verifies alone: no resolver is asked")
    func versionOneUnchanged() async throws {
        let record = try self.records.assertionRecord()
        #expect(record.format == .selfContained)
        let signed = try SignedEvidence.sign(record, with: self.records.serverKey)
        let asked = Asked()
        let verified = try await self.verify(
            signed.bytes,
            registrations: { _ in
                asked.record()
                return nil
            })
        #expect(verified.record == record && verified.record.format == .selfContained)
        #expect(asked.count == 0)
        #expect(try await self.verify(signed.bytes, registrations: nil).record == record)
    }

    // MARK: - One thing changed

    @Test("the registration missing, one byte changed, or another key's: refused with its code")
    func wrongRegistration() async throws {
        let (record, registration) = Self.referencing(try self.records.assertionRecord())
        let bytes = try SignedEvidence.sign(record, with: self.records.serverKey).bytes
        let (_, otherKeys) = Self.referencing(try self.records.attestationRecord())
        #expect(otherKeys != registration)
        await self.expect(.registrationMissing, bytes, nil, "no resolver")
        await self.expect(.registrationMissing, bytes, Self.resolver([]), "the resolver has none")
        await self.expect(.registrationMissing, bytes, Self.resolver([otherKeys]), "the resolver has only another key's")
        for index in [0, registration.count / 2, registration.count - 1] {
            var changed = registration
            changed[index] ^= 0x01
            let document = changed
            await self.expect(.registrationMismatch, bytes, { _ in document }, "byte \(index) changed")
        }
        await self.expect(.registrationMismatch, bytes, { _ in otherKeys }, "another key's registration")
        await self.expect(.registrationMismatch, bytes, { _ in registration + [0x0A] }, "a newline added")
        // The unchanged registration verifies: each refusal above is its change's.
        #expect(try await self.verify(bytes, registrations: { _ in registration }).record == record)
    }

    @Test("a record signed over a registration of another key, app id or environment (its hash matching): refused as a mismatch")
    func registrationNamesAnotherKey() async throws {
        let (record, registration) = Self.referencing(try self.records.assertionRecord())
        let envelope = try CanonicalJSON.parse(try SignedEvidence.sign(record, with: self.records.serverKey).bytes)
        var cases: [(String, [UInt8])] = []
        func changed(_ name: String, _ change: (inout KeyRegistration) -> Void) {
            var document = KeyRegistration(of: record)
            change(&document)
            cases.append((name, document.bytes))
        }
        changed("keyId") { $0.keyID[0] ^= 1 }
        changed("appId") { $0.appID = "ABCDE12345.com.formattest.other" }
        changed("environment") { $0.environment = .development }
        // Not a registration document, though its hash is the reference: not canonical, another type.
        cases.append(("whitespace", Array(String(decoding: registration, as: UTF8.self).replacingOccurrences(of: ",\"", with: ", \"").utf8)))
        cases.append(
            (
                "another type",
                Array(
                    String(decoding: registration, as: UTF8.self).replacingOccurrences(of: "formattest-key-registration", with: "formattest-key").utf8
                )
            ))
        for (name, document) in cases {
            #expect(document != registration, "\(name)")
            let payload = EvidenceTests.replacing(
                record.json, at: ["keyRegistration"],
                with: { _ in
                    .string(JSONString(Base64URL.encode(KeyRegistration.id(of: document))))
                })
            let bytes = try self.records.resigned(envelope, payload: payload.canonicalBytes)
            await self.expect(.registrationMismatch, bytes, { _ in document }, "\(name)")
        }
        // The same construction with the record's own registration verifies.
        let bytes = try self.records.resigned(envelope, payload: record.json.canonicalBytes)
        #expect(try await self.verify(bytes, registrations: { _ in registration }).record == record)
    }

    @Test(
        "a record referencing a registration whose id the caller has writes that id while the registration is its own, and computes it again once the record changes"
    )
    func knownRegistrationID() throws {
        let original = try self.records.assertionRecord()
        let registration = KeyRegistration(of: original)
        // The same bytes as a record that encodes and hashes its document.
        let known = original.referencing(registration, id: registration.id)
        #expect(known.json.canonicalBytes == Self.referencing(original).record.json.canonicalBytes)
        #expect(known == Self.referencing(original).record, "what the caller knows is not part of the record's value")
        // A wrong id is written only while the registration is the record's own (so the test sees
        // it is the one used), and never once the record's attestation changes.
        let wrong = [UInt8](repeating: 7, count: KeyRegistration.idLength)
        var record = original.referencing(registration, id: wrong)
        #expect(record.json["keyRegistration"] == .string(JSONString(Base64URL.encode(wrong))))
        record.keyAttestation.object[0] ^= 1
        #expect(record.json["keyRegistration"] == .string(JSONString(Base64URL.encode(KeyRegistration(of: record).id))))
        var otherKey = original.referencing(registration, id: wrong)
        otherKey.keyID[0] ^= 1
        #expect(otherKey.json["keyRegistration"] == .string(JSONString(Base64URL.encode(KeyRegistration(of: otherKey).id))))
    }

    @Test("a registration's content digest changes with each of its fields alone, and not otherwise")
    func contentDigest() throws {
        let record = try self.records.assertionRecord()
        let registration = KeyRegistration(of: record)
        #expect(registration.contentDigest == KeyRegistration(of: record).contentDigest)
        var changes: [(String, KeyRegistration)] = []
        func changed(_ name: String, _ change: (inout KeyRegistration) -> Void) {
            var copy = registration
            change(&copy)
            changes.append((name, copy))
        }
        changed("keyId") { $0.keyID[0] ^= 1 }
        changed("appId") { $0.appID += "x" }
        changed("environment") { $0.environment = $0.environment == .production ? .development : .production }
        changed("object") { $0.attestation.object[$0.attestation.object.count - 1] ^= 1 }
        changed("clientDataHash") { $0.attestation.clientDataHash[0] ^= 1 }
        changed("verifiedAt") { $0.attestation.verifiedAt = $0.attestation.verifiedAt.addingTimeInterval(0.001) }
        for (name, copy) in changes {
            #expect(copy.contentDigest != registration.contentDigest, "\(name)")
            #expect(copy.bytes != registration.bytes, "\(name): the document itself differs too")
        }
        // A byte moved from one field to the next ("AB" + "C" against "A" + "BC"): the lengths
        // keep them apart.
        var left = registration
        (left.keyID, left.appID) = (Array("AB".utf8), "C")
        var right = registration
        (right.keyID, right.appID) = (Array("A".utf8), "BC")
        #expect(left.contentDigest != right.contentDigest)
    }

    @Test("a version-2 record is read strictly: the reference's length and spelling, no keyAttestation beside it, none in version 1")
    func strictVersionTwo() async throws {
        let original = try self.records.assertionRecord()
        let (record, registration) = Self.referencing(original)
        let envelope = try CanonicalJSON.parse(try SignedEvidence.sign(record, with: self.records.serverKey).bytes)
        let resolver = Self.resolver([registration])
        guard case .object(let object) = record.json, case .object(let selfContained) = original.json else {
            Issue.record("a record is an object")
            return
        }
        func members(_ object: JSONObject, adding extra: [(String, JSONValue)] = [], dropping: String? = nil) throws -> [UInt8] {
            JSONValue.object(try JSONObject(object.members.filter { $0.name.string != dropping }.map { ($0.name.string, $0.value) } + extra))
                .canonicalBytes
        }
        let id = KeyRegistration.id(of: registration)
        for (name, payload) in [
            (
                "a 31-byte reference",
                try members(object, adding: [("keyRegistration", .string(JSONString(Base64URL.encode(id.dropLast()))))], dropping: "keyRegistration")
            ),
            (
                "a padded reference",
                try members(object, adding: [("keyRegistration", .string(JSONString(Base64URL.encode(id) + "=")))], dropping: "keyRegistration")
            ),
            ("no reference", try members(object, dropping: "keyRegistration")),
            ("keyAttestation beside the reference", try members(object, adding: [("keyAttestation", selfContained["keyAttestation"]!)])),
            ("version 1 with a reference", try members(selfContained, adding: [("keyRegistration", object["keyRegistration"]!)])),
            (
                "version 3",
                Array(
                    String(decoding: record.json.canonicalBytes, as: UTF8.self).replacingOccurrences(of: #""version":2"#, with: #""version":3"#).utf8)
            ),
        ] {
            #expect(payload != record.json.canonicalBytes, "\(name)")
            await self.expect(.malformedRecord, try self.records.resigned(envelope, payload: payload), resolver, "\(name)")
        }
    }

    // MARK: - Bundles

    @Test("a bundle of a version-2 record carries its registration: verifies alone; without it, changed, or on a version-1 record: refused")
    func bundles() async throws {
        let bundles = EvidenceBundleTests()
        // The bundle tests' own records: their server key is the one they verify with.
        let records = bundles.records
        let (record, registration) = Self.referencing(try records.assertionRecord())
        let signed = try SignedEvidence.sign(record, with: records.serverKey)
        let log = try bundles.log(with: signed.payload)
        for body in [EvidenceBundle.Record.envelope(signed.bytes), .leaf(signed.payload)] {
            let bundle = EvidenceBundle(
                checkpoint: log.checkpoint, index: 2, inclusionProof: try log.proof(2), record: body, registration: registration)
            let verified = try await bundles.verify(bundle)
            #expect(verified.evidence.record == record)
            let reread = try EvidenceBundle(bytes: try bundle.encoded())
            #expect(reread.registration == registration)
            #expect(try await bundles.verify(reread).evidence.record == record)
            var without = bundle
            without.registration = nil
            await bundles.expect(.registrationMissing, without, "no registration")
            var changed = bundle
            changed.registration![registration.count / 2] ^= 1
            await bundles.expect(.registrationMismatch, changed, "one byte of the registration")
        }
        // A version-1 record verifies in its bundle; with a registration added, the bundle is refused.
        let original = try records.assertionRecord()
        let selfContained = try SignedEvidence.sign(original, with: records.serverKey)
        let log1 = try bundles.log(with: selfContained.payload)
        var bundle = EvidenceBundle(checkpoint: log1.checkpoint, index: 2, inclusionProof: try log1.proof(2), record: .leaf(selfContained.payload))
        #expect(try await bundles.verify(bundle).evidence.record == original)
        bundle.registration = registration
        await bundles.expect(.malformedBundle, bundle, "a registration beside a version-1 record")
    }
}

/// Counts a resolver's calls.
private final class Asked: @unchecked Sendable {
    private let lock = NSLock()
    private var calls = 0
    func record() { self.lock.withLock { self.calls += 1 } }
    var count: Int { self.lock.withLock { self.calls } }
}
