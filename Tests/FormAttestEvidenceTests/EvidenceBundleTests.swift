//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttestSimulator
import CanonicalJSON
import FormAttestEvidence
import Foundation
import Testing
import TransparencyLog

/// Bundles over a small in-memory log whose leaf 2 is a record made on the simulated device (the
/// end-to-end script exports bundles from a real service's log and verifies them through the CLI).
struct EvidenceBundleTests {
    let records = try! EvidenceTests()
    let logSigner = try! NoteSigner(name: "bank.example/evidence", seed: [UInt8](repeating: 3, count: 32))

    /// Leaves 0…4, leaf 2 the record's payload; the checkpoint over all five, signed.
    struct Log {
        var leaves: [[UInt8]]
        var checkpoint: String

        func proof(_ index: UInt64) throws -> [[UInt8]] {
            let hashes = self.leaves.map { MerkleHash.leaf($0) }
            func subtree(_ id: SubtreeID) -> [UInt8] {
                let first = Int(id.firstLeaf)
                return MerkleHash.root(leafHashes: Array(hashes[first..<(first + (1 << id.level))]))
            }
            return try MerkleProof.inclusionRanges(index: index, size: UInt64(self.leaves.count)).map {
                MerkleProof.hash(of: $0, subtreeHash: subtree)
            }
        }
    }

    func log(with payload: [UInt8], signer: NoteSigner? = nil, origin: String? = nil) throws -> Log {
        let leaves = [Array("a".utf8), Array("b".utf8), payload, Array("d".utf8), Array("e".utf8)]
        var range = CompactRange()
        for leaf in leaves { range.append(leafHash: MerkleHash.leaf(leaf)) }
        let signer = signer ?? self.logSigner
        let checkpoint = try Checkpoint(origin: origin ?? signer.name, size: range.size, rootHash: range.root)
        return Log(leaves: leaves, checkpoint: try SignedNote.sign(text: checkpoint.body, with: signer))
    }

    func verify(_ bundle: EvidenceBundle) async throws(EvidenceError) -> EvidenceBundle.Verified {
        try await bundle.verify(
            logKey: try! NoteVerifier(keyString: self.logSigner.verifierKey), signers: self.records.signers, trustAnchors: self.records.anchors,
            receiptTrustAnchors: [self.records.authority.receiptAuthority.rootCertificate])
    }

    func expect(_ code: EvidenceError.Code, _ bundle: EvidenceBundle, _ comment: Comment, sourceLocation: SourceLocation = #_sourceLocation) async {
        do {
            _ = try await self.verify(bundle)
            Issue.record("accepted: \(comment)", sourceLocation: sourceLocation)
        } catch {
            #expect(error.code == code, "\(comment): \(error)", sourceLocation: sourceLocation)
        }
    }

    /// A signed record, its payload and a log holding it at leaf 2.
    func signedRecord() throws -> (envelope: [UInt8], payload: [UInt8], log: Log) {
        let record = try self.records.assertionRecord()
        let signed = try SignedEvidence.sign(record, with: self.records.serverKey)
        let payload = record.json.canonicalBytes
        return (signed.bytes, payload, try self.log(with: payload))
    }

    @Test("a bundle verifies with its envelope (server-signed) and with the leaf alone, and reads back equal")
    func verifies() async throws {
        let (envelope, payload, log) = try self.signedRecord()
        for record in [EvidenceBundle.Record.envelope(envelope), .leaf(payload)] {
            let bundle = EvidenceBundle(checkpoint: log.checkpoint, index: 2, inclusionProof: try log.proof(2), record: record)
            let verified = try await self.verify(bundle)
            #expect(verified.index == 2 && verified.checkpoint.size == 5)
            #expect(verified.serverSigned == (record == .envelope(envelope)))
            #expect(verified.evidence.record.counter == 7)
            let reread = try EvidenceBundle(bytes: try bundle.encoded())
            #expect(reread.checkpoint == bundle.checkpoint && reread.index == 2 && reread.inclusionProof == bundle.inclusionProof)
            if case .leaf = record { #expect(reread == bundle) }
        }
    }

    @Test("one thing changed: the index, a proof hash, the checkpoint's key or origin, the leaf, the envelope's payload")
    func oneThingChanged() async throws {
        let (envelope, payload, log) = try self.signedRecord()
        let proof = try log.proof(2)
        func bundle(index: UInt64 = 2, proof changed: [[UInt8]]? = nil, checkpoint: String? = nil, record: EvidenceBundle.Record? = nil)
            -> EvidenceBundle
        {
            EvidenceBundle(checkpoint: checkpoint ?? log.checkpoint, index: index, inclusionProof: changed ?? proof, record: record ?? .leaf(payload))
        }
        await self.expect(.notInLog, bundle(index: 3), "another index")
        await self.expect(.notInLog, bundle(index: 5), "an index past the checkpoint")
        var flipped = proof
        flipped[0][0] ^= 1
        await self.expect(.notInLog, bundle(proof: flipped), "a proof hash changed")
        await self.expect(.notInLog, bundle(proof: proof + [proof[0]]), "a proof hash added")
        var leaf = payload
        leaf[leaf.count / 2] ^= 1
        await self.expect(.notInLog, bundle(record: .leaf(leaf)), "one bit of the leaf")
        let otherRecord = try SignedEvidence.sign(try self.records.attestationRecord(), with: self.records.serverKey)
        await self.expect(.notInLog, bundle(record: .envelope(otherRecord.bytes)), "the envelope of another record")
        let otherSigner = try NoteSigner(name: "bank.example/evidence", seed: [UInt8](repeating: 4, count: 32))
        await self.expect(
            .checkpointInvalid, bundle(checkpoint: try self.log(with: payload, signer: otherSigner).checkpoint), "a checkpoint by another key")
        await self.expect(
            .checkpointInvalid, bundle(checkpoint: try self.log(with: payload, origin: "other.example/log").checkpoint), "a checkpoint of another log"
        )
        await self.expect(
            .checkpointInvalid, bundle(checkpoint: log.checkpoint.replacingOccurrences(of: "\n5\n", with: "\n6\n")), "the checkpoint's size changed")
        await self.expect(.serverSignatureInvalid, bundle(record: .envelope(Self.resignedPayload(envelope))), "the envelope's signature")
    }

    @Test("a bundle is read strictly: canonical, its type and version, one of envelope and record, no other member")
    func strictReading() throws {
        let (_, payload, log) = try self.signedRecord()
        let good = try EvidenceBundle(checkpoint: log.checkpoint, index: 2, inclusionProof: try log.proof(2), record: .leaf(payload)).encoded()
        #expect(throws: Never.self) { _ = try EvidenceBundle(bytes: good) }
        let text = String(decoding: good, as: UTF8.self)
        for (changed, why) in [
            (text.replacingOccurrences(of: #""version":1"#, with: #""version":2"#), "version 2"),
            (text.replacingOccurrences(of: #""type":"formattest-evidence-bundle""#, with: #""type":"formattest-evidence""#), "another type"),
            (text.replacingOccurrences(of: #"{"checkpoint""#, with: #"{"a":1,"checkpoint""#), "an unknown member"),
            (text.replacingOccurrences(of: #","record":"#, with: #","recorx":"#), "neither envelope nor record"),
            (text.replacingOccurrences(of: #""index":2"#, with: #""index":-2"#), "a negative index"),
            (text.replacingOccurrences(of: #""index":2"#, with: #""index":2.5"#), "a fractional index"),
            (text.replacingOccurrences(of: #"{"checkpoint""#, with: #"{ "checkpoint""#), "not canonical"),
        ] {
            #expect(changed != text, "\(why): the edit applies")
            #expect(throws: EvidenceError.self, "\(why)") { try EvidenceBundle(bytes: Array(changed.utf8)) }
        }
    }

    /// The envelope with one byte of its signature changed.
    static func resignedPayload(_ envelope: [UInt8]) -> [UInt8] {
        var text = String(decoding: envelope, as: UTF8.self)
        let marker = text.range(of: #""signature":""#)!
        let index = text.index(marker.upperBound, offsetBy: 3)
        let original = text[index]
        text.replaceSubrange(index...index, with: original == "A" ? "B" : "A")
        return Array(text.utf8)
    }
}
