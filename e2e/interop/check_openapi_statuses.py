#!/usr/bin/env python3
"""Checks that every operation of schemas/openapi.yaml declares the answers the service gives on
every route: 408 (the body did not arrive within the body timeout) and 413 (a body over 64 KiB),
which its body-deadline middleware gives whatever the method.

usage: check_openapi_statuses.py OPENAPI_YAML
Prints one line per operation that lacks one, then "N operations, M lacking"; exit 1 if any lacks.
"""
import sys

import yaml


def main():
    spec = yaml.safe_load(open(sys.argv[1]))
    operations = 0
    lacking = 0
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            if method not in ("get", "post", "put", "delete", "patch"):
                continue
            operations += 1
            missing = [status for status in ("408", "413") if status not in operation.get("responses", {})]
            if missing:
                lacking += 1
                print(f"{method.upper()} {path}: lacks {', '.join(missing)}")
    print(f"{operations} operations, {lacking} lacking")
    sys.exit(1 if lacking or operations == 0 else 0)


if __name__ == "__main__":
    main()
