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
import FormAttestServer
import FormAttestTokens
import FormattestCommands
import Foundation

extension Bench {
    /// What an evidence record costs: signing one around a real Apple attestation object (its
    /// size in the name), archiving it (exclusive create, write, fsync of the file and of its
    /// directory), and verifying one offline (chain, receipt and assertion).
    func evidenceCases(_ runner: BenchRunner) async throws -> [CaseResult] {
        let sample = try BenchSample(path: self.sample)
        let serverKey = P256.Signing.PrivateKey()
        let now = Date()
        let form = try SignedForm.make(fields: ["amount": .string(.init("10.00")), "to": .string(.init("bob"))], username: "alice", now: now)
        let policy = EvidenceRecord.Policy(
            appIDs: [sample.appID], environments: [.development, .production], trustAnchorKeyDigests: [],
            formMaximumAge: 300, formMaximumFutureSkew: 30, requireServerChallenge: false, sessionBound: false
        )
        // The size a record of a real device has: Apple's attestation object, an assertion's size.
        let real = EvidenceRecord(
            kind: .assertion, verifiedAt: now, username: "alice", form: form.canonicalBytes, keyID: sample.keyID, appID: sample.appID,
            environment: .production, counter: 1,
            keyAttestation: .init(object: sample.attestation, clientDataHash: sample.clientDataHash, verifiedAt: sample.validAt),
            assertion: [UInt8](repeating: 0xA2, count: 110), policy: policy
        )
        let size = try SignedEvidence.sign(real, with: serverKey).bytes.count

        // A record that verifies: the simulator's attestation and assertion at the real now.
        let authority = try SimulatedAttestationAuthority()
        let device = SimulatedDevice(authority: authority, appID: sample.appID, environment: .production)
        let key = device.key(0)
        let registering = Array(SHA256.hash(data: Array("registering form".utf8)))
        var simulatedPolicy = policy
        simulatedPolicy.trustAnchorKeyDigests = [EvidenceRecord.Policy.keyDigest(of: authority.rootCertificate)]
        let simulated = EvidenceRecord(
            kind: .assertion, verifiedAt: now, username: "alice", form: form.canonicalBytes, keyID: key.keyID, appID: sample.appID,
            environment: .production, counter: 1,
            keyAttestation: .init(object: try device.attest(key, clientDataHash: registering, at: now), clientDataHash: registering, verifiedAt: now),
            assertion: try device.assert(key, clientDataHash: form.clientDataHash, counter: 1), policy: simulatedPolicy
        )
        let signed = try SignedEvidence.sign(simulated, with: serverKey)
        let signers = [SigningKeys.thumbprint(serverKey.publicKey): serverKey.publicKey]

        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bench-evidence-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(at: directory) }
        let archive = EvidenceArchive(directory: directory.path)
        var sequence = 0
        return [
            try runner.measure("evidence.sign(record \(size) bytes, \(sample.name))", bytesPerOperation: size) {
                _ = try SignedEvidence.sign(real, with: serverKey)
            },
            try await runner.measureAsync("evidence.sign+archive(fsync)") {
                // Each a distinct record (the archive never replaces a file).
                sequence += 1
                var record = real
                record.counter = UInt32(sequence)
                try await archive.write(try SignedEvidence.sign(record, with: serverKey))
            },
            try await runner.measureAsync("evidence.verify(offline, simulated)") {
                _ = try await SignedEvidence.verify(
                    signed.bytes, signers: signers, trustAnchors: [authority.rootCertificate],
                    receiptTrustAnchors: [authority.receiptAuthority.rootCertificate]
                )
            },
        ]
    }
}
