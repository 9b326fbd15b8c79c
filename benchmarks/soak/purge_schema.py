#!/usr/bin/env python3
"""What a purge step costs in SQLite, before and after schema v9 (docs/performance.md,
"Sustained operation"): the replay records' table as the store has it, N expired records with
random (SHA-256) hashes, then steps of STEP records, each its own transaction in WAL mode with
synchronous = FULL, as the store runs them.

  old: the table before v9 (rowid table, hash primary key, expiry index), oldest expiry first
  new: v9 (WITHOUT ROWID, keyed by the hash), swept in hash order

usage: purge_schema.py old|new [RECORDS=1000000] [STEP=1000] [STEPS=100] [DIR=/tmp]
Prints the WAL bytes of the first step (from an empty WAL), the DELETE's and the COMMIT's
p50/p99/max, the time per 100,000 records and the largest WAL.
"""
import hashlib
import os
import sqlite3
import sys
import time

variant = sys.argv[1]
records = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
step = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
steps = int(sys.argv[4]) if len(sys.argv) > 4 else 100
path = os.path.join(sys.argv[5] if len(sys.argv) > 5 else "/tmp", f"purge-{variant}.sqlite")
for suffix in ("", "-wal", "-shm"):
    if os.path.exists(path + suffix):
        os.remove(path + suffix)

now = 1_700_000_000.0
db = sqlite3.connect(path, isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
if variant == "old":
    db.execute("CREATE TABLE form_hashes (hash BLOB PRIMARY KEY NOT NULL, expires_at REAL NOT NULL)")
    db.execute("CREATE INDEX form_hashes_expiry ON form_hashes(expires_at)")
else:
    db.execute("CREATE TABLE form_hashes (hash BLOB PRIMARY KEY NOT NULL, expires_at REAL NOT NULL) WITHOUT ROWID")
db.execute("BEGIN")
db.execute("PRAGMA cache_size=-262144")
db.executemany(
    "INSERT INTO form_hashes VALUES (?, ?)",
    ((hashlib.sha256(str(i).encode()).digest(), now - (i % 3600) - 1) for i in range(records)),
)
db.execute("COMMIT")
db.close()  # the last connection checkpoints and removes the WAL

db = sqlite3.connect(path, isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
db.execute("PRAGMA synchronous=FULL")
db.execute("PRAGMA wal_autocheckpoint=10000")  # the store's writer's bound


def wal():
    return os.path.getsize(path + "-wal") if os.path.exists(path + "-wal") else 0


deletes, commits, first_step_wal, largest_wal, deleted, cursor = [], [], None, 0, 0, b""
started = time.perf_counter()
for _ in range(steps):
    before = wal()
    a = time.perf_counter()
    db.execute("BEGIN IMMEDIATE")
    if variant == "old":
        deleted += db.execute(
            "DELETE FROM form_hashes WHERE rowid IN "
            "(SELECT rowid FROM form_hashes WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)",
            (now, step),
        ).rowcount
    else:
        last = db.execute(
            "SELECT max(hash) FROM (SELECT hash FROM form_hashes WHERE hash > ? AND expires_at <= ? ORDER BY hash LIMIT ?)",
            (cursor, now, step),
        ).fetchone()[0]
        if last is not None:
            deleted += db.execute(
                "DELETE FROM form_hashes WHERE hash > ? AND hash <= ? AND expires_at <= ?", (cursor, last, now)
            ).rowcount
            cursor = last
    b = time.perf_counter()
    db.execute("COMMIT")
    c = time.perf_counter()
    deletes.append(b - a)
    commits.append(c - b)
    if first_step_wal is None:
        first_step_wal = wal() - before
    largest_wal = max(largest_wal, wal())
elapsed = time.perf_counter() - started


def summary(values):
    values = sorted(values)
    return "p50 %.1f / p99 %.1f / max %.1f ms" % (
        values[len(values) // 2] * 1000,
        values[min(len(values) - 1, int(0.99 * len(values)))] * 1000,
        values[-1] * 1000,
    )


print(f"{variant}: {records} records, {steps} steps of {step}: {deleted} deleted in {elapsed:.2f} s")
print(f"  first step's WAL: {first_step_wal} bytes")
print(f"  DELETE {summary(deletes)}; COMMIT {summary(commits)}")
print(f"  per 100,000 records: {elapsed / max(deleted, 1) * 100_000:.2f} s; largest WAL {largest_wal / 1e6:.1f} MB")
for suffix in ("", "-wal", "-shm"):
    if os.path.exists(path + suffix):
        os.remove(path + suffix)
