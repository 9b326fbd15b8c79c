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

/// `serve`'s start-up refusal of unsafe modes, as OpenSSH's `StrictModes` (and its
/// `secure_path`): before the service opens its store or listens, it refuses (exit 2, naming the
/// file, its mode and the fix)
/// - a data directory, or the directory of a SQLite store file, that another user may write
///   (group or world writable): they could swap the store or the signing key;
/// - an existing SQLite store file (or its `-wal`/`-shm`) that another user may read or write;
/// - a signing key (the data directory's or `--signing-key`), an attestation authority's key,
///   a caller or an admin secret file that another user may read or write (any group or world
///   permission), or that is owned by another user: they could sign tokens or call as the
///   backend or the operators;
/// - a configuration file that another user may write, or read while it holds a secret (a
///   MongoDB URI with credentials);
/// - on the path of each of these, up to `/`, a directory owned by another user than root or the
///   service's own, or that another user may write: they could rename the file away and put
///   their own in its place. A sticky world-writable directory (`/tmp`) is accepted only when the
///   entry below it is owned by root or the service's user and not writable by others;
/// - one secret in both the caller and the admin secret files: the backend could then use the
///   admin API;
/// - a file or directory that decides trust, public but not to be changed by others, that group or
///   others may write or another user owns: the identity provider's key set file
///   (`--caller-jwks` as a path), the `--root` trust anchors, the previous signing keys
///   (`signing-key.previous.pem`, published in the JWKS), `--allowed-cdhashes-file`, the packed
///   format's attestation authority directory and its certificates, `--evidence-dir`,
///   `--evidence-log` and `--demo-dir` (pages served to users' browsers) (r3 F1).
///
/// Files reached through symbolic links (Kubernetes mounts secrets as `..data/` links) are judged
/// by their target, never by the link's own mode; the directories of the resolved path are
/// checked, and so is every directory that holds a link on the way, from the path as given
/// (whoever may write there could point the link elsewhere) (r3 F2).
///
/// A path that does not exist yet is not refused here (the data directory is created 0700, the
/// signing key and the SQLite file 0600); reading it later fails as before.
enum StrictModes {
    /// The mode bits (`0o7777`) and the owner of `path`, following symbolic links; nil when it does not exist.
    static func status(_ path: String) -> (mode: Int, owner: uid_t)? {
        // FileManager reads the link itself (lstat): ask it about the resolved path.
        guard let target = Self.resolved(path), let attributes = try? FileManager.default.attributesOfItem(atPath: target),
            let permissions = (attributes[.posixPermissions] as? NSNumber)?.intValue,
            let owner = (attributes[.ownerAccountID] as? NSNumber)?.uint32Value
        else { return nil }
        return (permissions & 0o7777, uid_t(owner))
    }

    /// Refuses a path that exists and is not a regular file (after symbolic links): reading a FIFO
    /// blocks until a writer comes, so `serve` would hang at start without a word (r13), and a
    /// device or a directory is no file of settings, keys or secrets. A missing path is left to
    /// the read, which says so.
    static func checkRegularFile(_ path: String, _ what: String) throws {
        // FileManager reads the link itself (lstat): ask it about the resolved path.
        guard let target = Self.resolved(path), let attributes = try? FileManager.default.attributesOfItem(atPath: target) else { return }
        guard attributes[.type] as? FileAttributeType == .typeRegular else {
            throw UsageError("\(what) \(path) is not a regular file (a pipe, a device or a directory); give a file.")
        }
    }

    /// The permission bits of `path` (following symbolic links), or nil when it does not exist.
    static func mode(_ path: String) -> Int? { Self.status(path)?.mode }

    /// `path` with every symbolic link resolved, or nil when it does not exist.
    static func resolved(_ path: String) -> String? {
        guard let pointer = realpath(path, nil) else { return nil }
        defer { free(pointer) }
        return String(cString: pointer)
    }

    /// The mode and owner of `path` itself, a symbolic link not followed (its own mode says nothing).
    static func linkStatus(_ path: String) -> (mode: Int, owner: uid_t, isLink: Bool)? {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
            let permissions = (attributes[.posixPermissions] as? NSNumber)?.intValue,
            let owner = (attributes[.ownerAccountID] as? NSNumber)?.uint32Value
        else { return nil }
        return (permissions & 0o7777, uid_t(owner), attributes[.type] as? FileAttributeType == .typeSymbolicLink)
    }

    /// Every symbolic link met while resolving `path` (absolute), as the path of the link with
    /// the directories above it resolved: the directory holding each must be as safe as the
    /// file's own. At most 40 links (the kernel's own bound); a loop fails later, at `realpath`.
    static func links(_ path: String) -> [String] {
        var pending = URL(fileURLWithPath: path).path.split(separator: "/").map(String.init)
        var current = "/"
        var found: [String] = []
        while !pending.isEmpty && found.count < 40 {
            let name = pending.removeFirst()
            if name.isEmpty || name == "." { continue }
            if name == ".." {
                current = Self.parent(current)
                continue
            }
            let candidate = current == "/" ? "/" + name : current + "/" + name
            if let target = try? FileManager.default.destinationOfSymbolicLink(atPath: candidate) {
                found.append(candidate)
                if target.hasPrefix("/") { current = "/" }
                pending = target.split(separator: "/").map(String.init) + pending
            } else {
                current = candidate
            }
        }
        return found
    }

    /// The directories of the resolved path and those holding each link on the way to it.
    static func checkPaths(given path: String, resolved target: String, _ what: String) throws {
        for link in Self.links(URL(fileURLWithPath: path).standardizedFileURL.path) {
            try Self.checkPath(link, what)
        }
        try Self.checkPath(target, what)
    }

    static func octal(_ mode: Int) -> String {
        "0" + String(mode & 0o777, radix: 8)
    }

    /// Root or the service's own user.
    static func trusted(_ owner: uid_t) -> Bool { owner == 0 || owner == geteuid() }

    static func parent(_ path: String) -> String {
        let parent = URL(fileURLWithPath: path).deletingLastPathComponent().path
        return parent.isEmpty ? "/" : parent
    }

    /// Every directory above `path` (absolute, links resolved), up to `/`, as OpenSSH's
    /// `secure_path`: owned by root or the service's user, not writable by group or others,
    /// except a sticky world-writable directory whose entry below is the service's own and not
    /// writable by others. Directories that do not exist yet are skipped.
    static func checkPath(_ path: String, _ what: String) throws {
        var child = path
        var directory = Self.parent(path)
        while true {
            if let status = Self.status(directory) {
                guard Self.trusted(status.owner) else {
                    throw UsageError(
                        "\(what): the directory \(directory) on the path of \(path) is owned by uid \(status.owner), neither root nor the service's user: that user could replace what is below it; move the file or run chown root \(directory)."
                    )
                }
                if status.mode & 0o022 != 0 {
                    let sticky = status.mode & 0o1000 != 0
                    guard sticky else {
                        throw UsageError(
                            "\(what): the directory \(directory) on the path of \(path) is writable by other users (mode \(Self.octal(status.mode))): another user could replace what is below it; run chmod go-w \(directory)."
                        )
                    }
                    // /tmp: others may create entries, but not rename or remove this one, so it
                    // is safe while this entry is the service's own and closed to others.
                    if let below = Self.linkStatus(child), !Self.trusted(below.owner) || (!below.isLink && below.mode & 0o022 != 0) {
                        throw UsageError(
                            "\(what): \(child), below the shared directory \(directory), is owned by uid \(below.owner) with mode \(Self.octal(below.mode)): it must be owned by root or the service's user and not writable by others; run chmod go-w \(child)."
                        )
                    }
                }
            }
            if directory == "/" { return }
            child = directory
            directory = Self.parent(directory)
        }
    }

    /// Refuses a directory that group or others may write, and unsafe directories above it.
    static func checkDirectory(_ path: String, _ what: String) throws {
        let absolute = URL(fileURLWithPath: path).standardizedFileURL.path
        let target = Self.resolved(absolute) ?? absolute
        if let status = Self.status(target) {
            guard status.mode & 0o022 == 0 else {
                throw UsageError(
                    "\(what) \(path) is writable by other users (mode \(Self.octal(status.mode))): another user could replace its files; run chmod go-w \(path)\(what.hasPrefix("--data-dir") ? " (serve makes it 0700)" : "")."
                )
            }
            guard Self.trusted(status.owner) else {
                throw UsageError(
                    "\(what) \(path) is owned by uid \(status.owner), neither root nor the service's user; run chown to the service's user."
                )
            }
        }
        try Self.checkPaths(given: absolute, resolved: target, what)
    }

    /// Refuses a file that decides trust (public, but not to be changed by others) that group or
    /// others may write or another user owns, and unsafe directories above it and its links.
    static func checkTrustFile(_ path: String, _ what: String) throws {
        try Self.checkRegularFile(path, what)
        guard let target = Self.resolved(path), let status = Self.status(target) else { return }
        let shown = target == URL(fileURLWithPath: path).standardizedFileURL.path ? path : "\(path) (-> \(target))"
        guard status.mode & 0o022 == 0 else {
            throw UsageError(
                "\(what) \(shown) is writable by other users (mode \(Self.octal(status.mode))): another user could change whom the service trusts; run chmod go-w \(target)."
            )
        }
        guard Self.trusted(status.owner) else {
            throw UsageError(
                "\(what) \(shown) is owned by uid \(status.owner), neither root nor the service's user; run chown to the service's user.")
        }
        try Self.checkPaths(given: path, resolved: target, what)
    }

    /// Refuses a key or secret file that group or others may read or write, or another user
    /// owns, judged by its target when it is a symbolic link, and unsafe directories above it.
    static func checkSecretFile(_ path: String, _ what: String) throws {
        try Self.checkRegularFile(path, what)
        guard let target = Self.resolved(path), let status = Self.status(target) else { return }
        let shown = target == URL(fileURLWithPath: path).standardizedFileURL.path ? path : "\(path) (-> \(target))"
        guard status.mode & 0o077 == 0 else {
            throw UsageError(
                "\(what) \(shown) is accessible to other users (mode \(Self.octal(status.mode))): it must be readable by the service's user alone; run chmod 600 \(target)."
            )
        }
        guard Self.trusted(status.owner) else {
            throw UsageError(
                "\(what) \(shown) is owned by uid \(status.owner), neither root nor the service's user; run chown to the service's user.")
        }
        try Self.checkPaths(given: path, resolved: target, what)
    }

    /// Refuses an existing SQLite store file, or its `-wal`/`-shm`, that group or others may read
    /// or write (files made by earlier releases, or copied in with a umask of 022).
    static func checkStoreFile(_ path: String) throws {
        for name in [path, path + "-wal", path + "-shm"] {
            guard let target = Self.resolved(name), let status = Self.status(target) else { continue }
            guard status.mode & 0o066 == 0 else {
                throw UsageError(
                    "--store: the SQLite file \(name) is accessible to other users (mode \(Self.octal(status.mode))): it holds every key and form; run chmod 600 \(name) (serve creates it 0600)."
                )
            }
            guard Self.trusted(status.owner) else {
                throw UsageError(
                    "--store: the SQLite file \(name) is owned by uid \(status.owner), neither root nor the service's user; run chown to the service's user."
                )
            }
            try Self.checkPaths(given: name, resolved: target, "--store: the SQLite file")
        }
    }

    /// Refuses a configuration file that group or others may write, or read while it holds a secret.
    static func checkConfigurationFile(_ path: String, holdsSecret: Bool) throws {
        guard let target = Self.resolved(path), let status = Self.status(target) else { return }
        if status.mode & 0o022 != 0 {
            throw UsageError(
                "--config: the configuration file \(path) is writable by other users (mode \(Self.octal(status.mode))): another user could change every setting; run chmod go-w \(path)."
            )
        }
        if holdsSecret && status.mode & 0o044 != 0 {
            throw UsageError(
                "--config: the configuration file \(path) holds a secret (the store's credentials) and is readable by other users (mode \(Self.octal(status.mode))); run chmod 600 \(path), or give the secret by FORMATTEST_STORE."
            )
        }
        guard Self.trusted(status.owner) else {
            throw UsageError(
                "--config: the configuration file \(path) is owned by uid \(status.owner), neither root nor the service's user; run chown to the service's user."
            )
        }
        try Self.checkPaths(given: path, resolved: target, "--config: the configuration file")
    }

    /// The files and directories that decide whom the service trusts or what it serves (r3 F1).
    static func checkTrust(_ plan: ServePlan) throws {
        if let jwks = plan.caller.jwks, !jwks.lowercased().hasPrefix("https://"), !jwks.lowercased().hasPrefix("http://") {
            try Self.checkTrustFile(jwks, "--caller-jwks: the identity provider's key set")
        }
        for root in plan.roots { try Self.checkTrustFile(root, "--root: the trust anchor") }
        if plan.signing.signingKeyPath == nil {
            try Self.checkTrustFile(plan.signing.keyDirectory.previousKeysFile.path, "--data-dir: the previous signing keys (published in the JWKS)")
        }
        if let path = plan.signalPolicy.allowedCDHashesFile { try Self.checkTrustFile(path, "--allowed-cdhashes-file: the allowed CDHashes") }
        if let directory = plan.evidence?.archiveDirectory { try Self.checkDirectory(directory, "--evidence-dir: the evidence directory") }
        if let directory = plan.evidence?.log?.directory { try Self.checkDirectory(directory, "--evidence-log: the evidence log's directory") }
        if let directory = plan.demoDirectory { try Self.checkDirectory(directory, "--demo-dir: the demo pages' directory") }
    }

    /// Every check of `serve`'s files, and the secret shared between caller and admin files.
    static func check(
        _ plan: ServePlan, callerSecrets: BackendSecrets?, adminSecrets: BackendSecrets?, configurationFile: (path: String, holdsSecret: Bool)? = nil
    ) throws {
        if let configurationFile { try Self.checkConfigurationFile(configurationFile.path, holdsSecret: configurationFile.holdsSecret) }
        try Self.checkDirectory(plan.signing.dataDirectory, "--data-dir: the data directory")
        if let store = plan.sqliteFile {
            let absolute = URL(fileURLWithPath: store).standardizedFileURL.path
            try Self.checkDirectory(Self.parent(absolute), "--store: the directory of the SQLite file")
            try Self.checkStoreFile(absolute)
        }
        if let key = plan.signing.signingKeyPath {
            try Self.checkSecretFile(key, "--signing-key: the signing key")
        } else {
            try Self.checkSecretFile(plan.signing.keyDirectory.currentKeyFile.path, "--data-dir: the signing key")
        }
        if let authority = plan.packed.directory {
            try Self.checkDirectory(authority, "--attestation-ca: the authority's directory")
            for name in ["root.pem", "attestation.pem"] {
                try Self.checkTrustFile(
                    URL(fileURLWithPath: authority).appendingPathComponent(name).path, "--attestation-ca: the authority's certificate")
            }
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
        // Each listener may hold its connections' hard ceiling (a little above the total).
        let needed = rlim_t(ConnectionLimits.ceiling(total: connections) * listeners + Self.reserve)
        if limit.rlim_cur != rlim_t.max && limit.rlim_cur < needed {
            var raised = limit
            raised.rlim_cur = limit.rlim_max == rlim_t.max ? needed : min(needed, limit.rlim_max)
            if setrlimit(resource, &raised) == 0 { limit = raised }
        }
        let available = limit.rlim_cur == rlim_t.max ? Int.max : Int(clamping: limit.rlim_cur)
        guard available < Int(needed) else { return (connections, available) }
        let fitting = ConnectionLimits.total(fitting: (available - Self.reserve) / listeners)
        guard !explicit, fitting >= 16 else {
            throw UsageError(
                "--max-connections \(connections): \(listeners) listener(s) need \(needed) file descriptors with the reserve, but the process may open \(available); lower --max-connections or raise the limit (LimitNOFILE= in systemd)."
            )
        }
        return (fitting, available)
    }
}
