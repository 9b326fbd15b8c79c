//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestTestSupport
import Foundation
import SwiftASN1
import Testing
import WebAuthn
import X509

extension PasskeyRecording {
    var response: [UInt8] {
        get throws { Array(try Data(contentsOf: self.url)) }
    }

    var time: Date {
        get throws {
            let text = try #require(self.at)
            return try #require(ISO8601DateFormatter().date(from: text))
        }
    }

    func policy() throws -> WebAuthnPolicy {
        let anchors = try (self.roots ?? []).map { name in
            try Certificate(pemEncoded: String(contentsOf: Self.directory.appendingPathComponent(name), encoding: .utf8))
        }
        return WebAuthnPolicy(
            relyingPartyID: self.rpId,
            allowedOrigins: Set(self.origins),
            requireUserVerification: self.requireUserVerification ?? false,
            trustAnchors: anchors
        )
    }
}

struct RecordedResponseTests {
    @Test("recorded registrations verify or are refused as their recorders expect", arguments: PasskeyRecording.registrations)
    func registration(_ recorded: PasskeyRecording) async throws {
        let verifier = try WebAuthnVerifier(policy: recorded.policy())
        let challenge = try #require(WebAuthnBase64.decode(recorded.challenge))
        let (response, time) = (try recorded.response, try recorded.time)
        let outcome: Result<VerifiedRegistration, WebAuthnError>
        do {
            outcome = .success(try await verifier.verifyRegistration(json: response, challenge: challenge, at: time))
        } catch {
            outcome = .failure(error)
        }
        let expect = recorded.expect
        switch outcome {
        case .success(let result):
            #expect(expect.verified, "verified, expected \(expect.error ?? "")")
            if let format = expect.format { #expect(result.format.rawValue == format) }
            if let count = expect.signCount { #expect(result.signCount == count) }
            if let aaguid = expect.aaguid { #expect(result.aaguidString == aaguid) }
            if let id = expect.credentialId { #expect(WebAuthnBase64.encode(result.credentialID) == id) }
            if let key = expect.publicKey { #expect(WebAuthnBase64.encode(result.publicKey.cborEncoded) == key) }
            if let flag = expect.userVerified { #expect(result.userVerified == flag) }
            if let flag = expect.backupEligible { #expect(result.backupEligible == flag) }
            if let flag = expect.backedUp { #expect(result.backedUp == flag) }
            if let anchored = expect.attestationAnchored { #expect(result.attestationAnchored == anchored) }
        case .failure(let error):
            #expect(!expect.verified, "refused: \(error)")
            #expect(error.code.identifier == expect.error, "\(error)")
        }
    }

    @Test("recorded assertions verify or are refused as their recorders expect", arguments: PasskeyRecording.authentications)
    func authentication(_ recorded: PasskeyRecording) throws {
        let verifier = try WebAuthnVerifier(policy: recorded.policy())
        let challenge = try #require(WebAuthnBase64.decode(recorded.challenge))
        let keyText = try #require(recorded.publicKey)
        let key = try CredentialPublicKey(cborEncoded: try #require(WebAuthnBase64.decode(keyText)))
        let response = try recorded.response
        let outcome: Result<VerifiedAuthentication, WebAuthnError>
        do {
            outcome = .success(
                try verifier.verifyAuthentication(
                    AuthenticationResponse(json: response),
                    publicKey: key,
                    challenge: challenge,
                    previousSignCount: recorded.previousSignCount ?? 0
                )
            )
        } catch {
            outcome = .failure(error)
        }
        let expect = recorded.expect
        switch outcome {
        case .success(let result):
            #expect(expect.verified, "verified, expected \(expect.error ?? "")")
            if let count = expect.signCount { #expect(result.signCount == count) }
            if let flag = expect.userVerified { #expect(result.userVerified == flag) }
            if let id = expect.credentialId { #expect(WebAuthnBase64.encode(result.credentialID) == id) }
        case .failure(let error):
            #expect(!expect.verified, "refused: \(error)")
            #expect(error.code.identifier == expect.error, "\(error)")
        }
    }

    @Test("the manifest covers every implemented format, verified and refused, and ES256, EdDSA and RS256 keys")
    func coverage() {
        let formats = Set(PasskeyRecording.registrations.compactMap(\.expect.format))
        #expect(formats == Set(AttestationFormat.implemented.map(\.rawValue)))
        // Each implemented format has a recording that verifies; tpm and android-key also one refused by its recorder.
        let refusedFiles = Set(PasskeyRecording.registrations.filter { !$0.expect.verified }.map(\.file))
        #expect(refusedFiles.contains("registration-android-key-es256-spec.json"))
        #expect(PasskeyRecording.authentications.count == 8)
    }
}
