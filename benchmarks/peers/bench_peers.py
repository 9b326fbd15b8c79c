#!/usr/bin/env python3
"""Peers measured on the same machine and inputs as `formattest-dev bench`: pyattest (App Attest
attestation verification) and the rfc8785 package (RFC 8785 canonicalization). Prints JSON.

usage: bench_peers.py [--duration SECONDS] [--repo DIR]
"""
import argparse
import asyncio
import base64
import datetime
import functools
import json
import os
import statistics
import time


def measure(name, operation, duration, bytes_per_op=None):
    operation()  # warm up, and fail early
    samples = []
    deadline = time.perf_counter() + duration
    start = time.perf_counter()
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        operation()
        samples.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    samples.sort()
    ops = len(samples) / elapsed
    result = {
        "name": name,
        "operations": len(samples),
        "opsPerSecond": round(ops),
        "p50Microseconds": round(samples[len(samples) // 2] * 1e6, 2),
        "p99Microseconds": round(samples[min(len(samples) - 1, int(len(samples) * 0.99))] * 1e6, 2),
    }
    if bytes_per_op:
        result["megabytesPerSecond"] = round(bytes_per_op * ops / 1e6, 1)
    return result


def pyattest_case(repo, duration):
    import pyattest.verifiers.apple_attestation as apple_attestation
    from pyattest.attestation import Attestation
    from pyattest.configs.apple import AppleConfig

    sample = json.load(open(os.path.join(repo, "Tests/Fixtures/appattest/samples/uebelack_production.json")))
    moment = datetime.datetime.fromisoformat(sample["valid_at"].replace("Z", "+00:00"))
    # pyattest validates the chain "now"; its leaf expired in 2024, so pin the time the way
    # pyhanko-certvalidator allows (the validation context's `moment`).
    apple_attestation.ValidationContext = functools.partial(apple_attestation.ValidationContext, moment=moment)
    raw = base64.b64decode(sample["attestation_b64"])
    config = AppleConfig(key_id=base64.b64decode(sample["key_id_b64"]), app_id=sample["app_id"], production=True)
    challenge = sample["challenge_utf8"].encode()  # pyattest hashes it into clientDataHash itself

    def verify():
        attestation = Attestation(raw, challenge, config)
        asyncio.run(attestation.verify())
        assert attestation.verified

    return measure("pyattest.attestation.verify(uebelack_production)", verify, duration)


def rfc8785_cases(repo, duration):
    import rfc8785

    form = open(os.path.join(repo, "benchmarks/jcs/form-small.json"), "rb").read()
    document = open(os.path.join(repo, "benchmarks/jcs/doc-1mb.json"), "rb").read()
    expected = open(os.path.join(repo, "benchmarks/jcs/doc-1mb.expected.json"), "rb").read()
    assert rfc8785.dumps(json.loads(document)) == expected
    return [
        measure("rfc8785.loads+dumps.form-small", lambda: rfc8785.dumps(json.loads(form)), duration, len(form)),
        measure("rfc8785.loads+dumps.doc-1mb", lambda: rfc8785.dumps(json.loads(document)), duration, len(document)),
    ]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=2.0)
    parser.add_argument("--repo", default=os.path.join(os.path.dirname(__file__), "../.."))
    args = parser.parse_args()
    cases = [pyattest_case(args.repo, args.duration)] + rfc8785_cases(args.repo, args.duration)
    print(json.dumps({"durationPerCase": args.duration, "cases": cases}, indent=2))


if __name__ == "__main__":
    main()
