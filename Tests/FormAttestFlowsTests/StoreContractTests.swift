//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AttestationStoreContract
import FormAttestFlows
import Testing

/// The store contract on the in-memory store (SQLite's runs in SQLiteAttestStoreTests, MongoDB's
/// in MongoAttestStoreTests).
struct StoreContractTests {
    static let names = StoreContract.all.map(\.name)

    @Test("memory store passes the contract", arguments: StoreContractTests.names)
    func memory(check: String) async throws {
        try await StoreContract.run(check) { MemoryAttestationStore() }
    }
}
