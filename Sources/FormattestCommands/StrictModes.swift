//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestServer
import FormAttestTokens
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `serve`'s start-up refusal of unsafe modes, as OpenSSH's `StrictModes`: before the service
/// opens its store or listens, it refuses (exit 2, naming the file, its mode and the fix)
/// - a data directory, or the directory of a SQLite store file, that another user may write
///   (group or world writable): they could swap the store or the signing key;
/// - a signing key (the data directory's or `--signing-key`), an attestation authority's key,
///   a caller or an admin secret file that another user may read or write (any group or world
///   permission): they could sign tokens or call as the backend or the operators;
/// - one secret in both the caller and the admin secret files: the backend could then use the
///   admin API.
///
/// A path that does not exist yet is not refused here (the data directory is created 0700, the
/// signing key 0600); reading it later fails as before.
enum StrictModes {
    /// The permission bits of `path` (following symbolic links), or nil when it does not exist.
    static func mode(_ path: String) -> Int? {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
            let permissions = (attributes[.posixPermissions] as? NSNumber)?.intValue
        else { return nil }
        return permissions & 0o7777
    }

    static func octal(_ mode: Int) -> String {
        "0" + String(mode & 0o777, radix: 8)
    }

    /// Refuses a directory that group or others may write.
    static func checkDirectory(_ path: String, _ what: String) throws {
        guard let mode = Self.mode(path), mode & 0o022 != 0 else { return }
        throw UsageError(
            "\(what) \(path) is writable by other users (mode \(Self.octal(mode))): another user could replace its files; run chmod go-w \(path) (serve makes it 0700)."
        )
    }

    /// Refuses a key or secret file that group or others may read or write.
    static func checkSecretFile(_ path: String, _ what: String) throws {
        guard let mode = Self.mode(path), mode & 0o077 != 0 else { return }
        throw UsageError(
            "\(what) \(path) is accessible to other users (mode \(Self.octal(mode))): it must be readable by the service's user alone; run chmod 600 \(path)."
        )
    }

    /// Every check of `serve`'s files, and the secret shared between caller and admin files.
    static func check(_ plan: ServePlan, callerSecrets: BackendSecrets?, adminSecrets: BackendSecrets?) throws {
        let dataDirectory = URL(fileURLWithPath: plan.signing.dataDirectory).standardizedFileURL.path
        try Self.checkDirectory(dataDirectory, "--data-dir: the data directory")
        if let store = plan.sqliteFile {
            let directory = URL(fileURLWithPath: store).deletingLastPathComponent().path
            try Self.checkDirectory(directory, "--store: the directory of the SQLite file")
        }
        if let key = plan.signing.signingKeyPath {
            try Self.checkSecretFile(key, "--signing-key: the signing key")
        } else {
            try Self.checkSecretFile(plan.signing.keyDirectory.currentKeyFile.path, "--data-dir: the signing key")
        }
        if let authority = plan.packed.directory {
            for name in ["root-key.pem", "attestation-key.pem"] {
                try Self.checkSecretFile(URL(fileURLWithPath: authority).appendingPathComponent(name).path, "--attestation-ca: the authority's key")
            }
        }
        if let path = plan.caller.secretFile { try Self.checkSecretFile(path, "--caller-secret-file: the callers' secret file") }
        if let path = plan.caller.adminSecretFile { try Self.checkSecretFile(path, "--admin-secret-file: the operators' secret file") }
        if let callerSecrets, let adminSecrets, callerSecrets.sharesSecret(with: adminSecrets) {
            throw UsageError(
                "--caller-secret-file and --admin-secret-file hold the same secret: the backend could use the admin API; give the operators a secret of their own."
            )
        }
    }
}

/// The process's descriptor limit must hold the connection limits of every listener, with room
/// for the store, files and outgoing connections: else, at the descriptor limit, the listener
/// would fail to accept (EMFILE), silently. The soft limit is raised toward the hard limit when
/// needed. A `--max-connections` the limit cannot hold stops `serve` (exit 2); the default is
/// lowered to what it can hold (and the log says so).
enum DescriptorLimit {
    /// Descriptors kept beside the connections (the store, logs, files, the JWKS fetch).
    static let reserve = 128

    /// Raises the soft limit if needed; returns the connections per listener and the limit in force.
    static func ensure(connections: Int, listeners: Int, explicit: Bool) throws -> (connections: Int, descriptors: Int) {
        var limit = rlimit()
        #if canImport(Glibc)
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        #else
        let resource = RLIMIT_NOFILE
        #endif
        guard getrlimit(resource, &limit) == 0 else { return (connections, -1) }
        let needed = rlim_t(connections * listeners + Self.reserve)
        if limit.rlim_cur != rlim_t.max && limit.rlim_cur < needed {
            var raised = limit
            raised.rlim_cur = limit.rlim_max == rlim_t.max ? needed : min(needed, limit.rlim_max)
            if setrlimit(resource, &raised) == 0 { limit = raised }
        }
        let available = limit.rlim_cur == rlim_t.max ? Int.max : Int(clamping: limit.rlim_cur)
        guard available < Int(needed) else { return (connections, available) }
        let fitting = (available - Self.reserve) / listeners
        guard !explicit, fitting >= 16 else {
            throw UsageError(
                "--max-connections \(connections): \(listeners) listener(s) need \(needed) file descriptors with the reserve, but the process may open \(available); lower --max-connections or raise the limit (LimitNOFILE= in systemd)."
            )
        }
        return (fitting, available)
    }
}
