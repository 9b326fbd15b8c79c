//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
import FormAttestFlows
import FormAttestForm
import Foundation
import RFC3339
import Testing

/// Every status is decided in one place (``APIError``): the same form error is answered with the
/// same status by every endpoint that reads a form, the dev simulator included.
struct StatusMappingTests {
    static func text(_ value: String) -> JSONValue { .string(JSONString(value)) }

    /// A form with one thing wrong, the code it must be refused with, and the status the flows'
    /// category gives that code.
    static let badForms: [(name: String, form: JSONValue, code: String, status: Int)] = [
        (
            "no timestamp",
            .object(JSONObject(constantMembers: [("action", text("transfer")), ("username", text("alice")), ("nonce", text("n-1"))])),
            "form_missing_field", 422
        ),
        (
            "a timestamp that is not RFC 3339 UTC",
            .object(
                JSONObject(constantMembers: [
                    ("action", text("transfer")), ("username", text("alice")), ("nonce", text("n-2")), ("timestamp", text("yesterday")),
                ])
            ),
            "form_invalid_field", 400
        ),
    ]

    @Test("the same form error has the same status on /attest, /assert, /register-pooled and /dev/simulate")
    func sameFormErrorSameStatus() async throws {
        let harness = try ServiceHarness()
        let bytes = Self.text(Base64URL.encode([UInt8](repeating: 7, count: 32)))
        try await harness.run { client in
            for bad in Self.badForms {
                let bodies: [(String, [(String, JSONValue)])] = [
                    ("/api/dev/simulate", [("action", Self.text("attest")), ("form", bad.form)]),
                    (
                        "/api/appattest/attest",
                        [("username", Self.text("alice")), ("keyId", bytes), ("attestationObject", bytes), ("form", bad.form)]
                    ),
                    ("/api/appattest/assert", [("username", Self.text("alice")), ("keyId", bytes), ("assertion", bytes), ("form", bad.form)]),
                    (
                        "/api/appattest/register-pooled",
                        [
                            ("username", Self.text("alice")), ("keyId", bytes), ("attestationObject", bytes), ("poolChallenge", bytes),
                            ("assertion", bytes),
                            ("form", bad.form),
                        ]
                    ),
                ]
                for (path, body) in bodies {
                    let answer = try await client.post(path, body)
                    #expect(answer.errorCode == bad.code, "\(bad.name) on \(path): \(String(decoding: answer.body, as: UTF8.self))")
                    #expect(answer.status == bad.status, "\(bad.name) on \(path): \(answer.status)")
                }
            }
        }
        // The negative: a well-formed form passes the form rules on the simulator (200).
        try await harness.run { client in
            let good = try await client.post("/api/dev/simulate", [("action", Self.text("attest")), ("form", ServiceHarness.form())])
            #expect(good.status == 200)
        }
        try await OpenAPIConformance.check(harness.recorder)
    }
}
