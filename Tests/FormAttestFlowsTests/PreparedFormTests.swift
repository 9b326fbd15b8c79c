//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttestSimulator
import CanonicalJSON
import FormAttestFlows
import FormAttestForm
import Foundation
import RFC3339
import Testing

/// A request decoded from a body carries its form already parsed (the form is parsed and
/// canonicalized once); the flows use that parse only for the very bytes it was made from, and
/// only for a form `SignedForm(jsonBytes:)` would accept from them.
struct PreparedFormTests {
    /// `{username, keyId, assertion, form}` with `form` spliced in as JSON text.
    static func body(key: SimulatedKey, assertion: [UInt8], formJSON: String) throws -> JSONValue {
        try CanonicalJSON.parse(
            Array(
                #"{"username": "alice", "keyId": "\#(Base64URL.encode(key.keyID))", "assertion": "\#(Base64URL.encode(assertion))", "form": \#(formJSON)}"#
                    .utf8
            ),
            limits: .init(maximumSize: 1 << 20, maximumDepth: FormFlows.maximumBodyDepth, exactNumbers: true)
        )
    }

    @Test("a form decoded with its body is accepted, and its canonical bytes are the form's")
    func decodedBodyIsAccepted() async throws {
        let harness = try FlowHarness()
        let key = harness.device.key(0)
        try await harness.register(key)
        let form = FlowHarness.form(nonce: "n-2")
        let assertion = try harness.device.assert(key, clientDataHash: FlowHarness.hash(form), counter: 1)
        let request = try FormFlows.AssertRequest(body: Self.body(key: key, assertion: assertion, formJSON: String(decoding: form, as: UTF8.self)))
        #expect(request.form == (try SignedForm(jsonBytes: form)).canonicalBytes)
        let outcome = try await harness.flows.assert(request, now: FlowHarness.now)
        #expect(outcome.form.clientDataHash == (try FlowHarness.hash(form)))
    }

    @Test("form bytes replaced after decoding are the ones verified (the earlier parse is not used)")
    func replacedFormBytesAreVerified() async throws {
        let harness = try FlowHarness()
        let key = harness.device.key(0)
        try await harness.register(key)
        let signed = FlowHarness.form(nonce: "n-2")
        let assertion = try harness.device.assert(key, clientDataHash: FlowHarness.hash(signed), counter: 1)
        var request = try FormFlows.AssertRequest(body: Self.body(key: key, assertion: assertion, formJSON: String(decoding: signed, as: UTF8.self)))
        request.form = try SignedForm(jsonBytes: FlowHarness.form(amount: "99.00", nonce: "n-2")).canonicalBytes
        do {
            _ = try await harness.flows.assert(request, now: FlowHarness.now)
            Issue.record("a form the assertion did not sign was accepted")
        } catch {
            #expect(error.category == .verificationFailed, "\(error)")
        }
    }

    @Test("a form nested deeper than a form may be is refused with the same error as when parsed from its bytes")
    func tooDeepFormIsRefusedAsBefore() async throws {
        let harness = try FlowHarness()
        let key = harness.device.key(0)
        try await harness.register(key)
        // 17 levels (the form's own object and 16 below): within a body's 32, beyond a form's 16.
        let deep = String(repeating: #"{"a": "#, count: 16) + "1" + String(repeating: "}", count: 16)
        let text = #"{"username": "alice", "timestamp": "\#(RFC3339UTC.format(FlowHarness.now))", "deep": \#(deep)}"#
        let bytes = try CanonicalJSON.parse(Array(text.utf8), limits: .init(maximumSize: 1 << 20, maximumDepth: 32, exactNumbers: true))
            .canonicalBytes
        let assertion = try harness.device.assert(key, clientDataHash: Array(repeating: 7, count: 32), counter: 1)
        let decoded = try FormFlows.AssertRequest(body: Self.body(key: key, assertion: assertion, formJSON: text))
        let direct = FormFlows.AssertRequest(username: "alice", keyID: key.keyID, assertion: assertion, form: bytes)
        var codes: [String] = []
        for request in [decoded, direct] {
            do {
                _ = try await harness.flows.assert(request, now: FlowHarness.now)
                Issue.record("a form nested 17 deep was accepted")
            } catch {
                codes.append(error.code.identifier)
                #expect(error.category == .malformedInput, "\(error)")
            }
        }
        #expect(codes.count == 2 && codes[0] == codes[1], "\(codes)")
    }
}
