#!/usr/bin/env python3
"""Checks recorded HTTP exchanges, or samples of the response types, against schemas/openapi.yaml.

usage: check_openapi.py OPENAPI_YAML EXCHANGES_JSONL

Each line is an exchange {method, path, status, contentType, body} or a sample of a Swift
response type {type, schema, body}.

An exchange: the operation must declare the status; the content type must be one the response
declares; JSON bodies must validate against its schema (JSON Schema 2020-12, as OpenAPI 3.1
specifies). A path the document does not know must be a 404 with the Error schema.

A sample: its type's schema must exist under components/schemas (a type without one fails), and
the body must validate against it.

Prints "N passed, M failed".
"""
import json
import os
import sys

import yaml
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from formattest_support import Checks  # noqa: E402


def main():
    spec = yaml.safe_load(open(sys.argv[1]))
    registry = Registry().with_resource("urn:openapi", Resource(contents=spec, specification=DRAFT202012))

    def validator(ref):
        return Draft202012Validator({"$ref": "urn:openapi" + ref}, registry=registry)

    def resolve(node):
        while isinstance(node, dict) and "$ref" in node:
            path = node["$ref"].lstrip("#/").split("/")
            node = spec
            for part in path:
                node = node[part]
        return node

    checks = Checks()
    for number, line in enumerate(open(sys.argv[2]), 1):
        if not line.strip():
            continue
        exchange = json.loads(line)
        if "schema" in exchange:
            label = f"{exchange['type']} ({exchange['schema']})"
            if exchange["schema"] not in spec.get("components", {}).get("schemas", {}):
                checks.fail(f"{label}: no such schema under components/schemas")
                continue
            errors = sorted(validator("#/components/schemas/" + exchange["schema"]).iter_errors(json.loads(exchange["body"])), key=str)
            if errors:
                checks.fail(f"{label}: {errors[0].message} at {list(errors[0].absolute_path)}")
                continue
            checks.succeed()
            continue
        label = f"{exchange['method'].upper()} {exchange['path']} {exchange['status']}"
        content_type = exchange["contentType"].split(";")[0].strip()
        operation = spec["paths"].get(exchange["path"], {}).get(exchange["method"])
        if operation is None:
            if exchange["status"] == 404 and content_type == "application/json":
                errors = list(validator("#/components/schemas/Error").iter_errors(json.loads(exchange["body"])))
                if not errors:
                    checks.succeed()
                    continue
            checks.fail(f"{label}: not in the document")
            continue
        response = operation["responses"].get(str(exchange["status"])) or operation["responses"].get("default")
        if response is None:
            checks.fail(f"{label}: status not declared")
            continue
        response = resolve(response)
        content = response.get("content", {})
        if content_type not in content:
            checks.fail(f"{label}: content type {content_type!r} not declared")
            continue
        if content_type == "application/json":
            schema = content[content_type]["schema"]
            ref = schema["$ref"] if "$ref" in schema else None
            check = validator(ref) if ref else Draft202012Validator(schema, registry=registry)
            errors = sorted(check.iter_errors(json.loads(exchange["body"])), key=str)
            if errors:
                checks.fail(f"{label}: {errors[0].message} at {list(errors[0].absolute_path)}")
                continue
        checks.succeed()
    checks.finish()


if __name__ == "__main__":
    main()
