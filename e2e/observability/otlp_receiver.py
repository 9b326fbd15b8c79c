#!/usr/bin/env python3
"""A minimal OTLP/HTTP trace receiver for the trace tests, built on the OpenTelemetry protocol's
own definitions (PyPI opentelemetry-proto): it decodes each POST /v1/traces body as an
ExportTraceServiceRequest (protobuf) and appends every span to OUT as one JSON line.

usage: otlp_receiver.py OUT [--port N] [--count-only]
Prints its port on the first line of stdout, then serves on 127.0.0.1 until stdin closes.
--count-only (for the benchmark): decodes each request but writes only a line of counts a request
(spans, bytes), so that the receiver's own CPU stays small beside the service under load.
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

OUT = sys.argv[1]
COUNT_ONLY = "--count-only" in sys.argv
PORT = int(sys.argv[sys.argv.index("--port") + 1]) if "--port" in sys.argv else 0
LOCK = threading.Lock()


def value(any_value):
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value(v) for v in any_value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value(kv.value) for kv in any_value.kvlist_value.values}
    if kind == "bytes_value":
        return any_value.bytes_value.hex()
    return getattr(any_value, kind) if kind else None


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
            self.send_response(404 if self.path != "/v1/traces" else 415)
            self.end_headers()
            return
        request = trace_service_pb2.ExportTraceServiceRequest()
        request.ParseFromString(body)
        lines = []
        if COUNT_ONLY:
            spans = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
            lines.append(json.dumps({"spans": spans, "bytes": len(body)}))
            request = trace_service_pb2.ExportTraceServiceRequest()
        for resource_spans in request.resource_spans:
            resource = {kv.key: value(kv.value) for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    lines.append(json.dumps({
                        "traceId": span.trace_id.hex(),
                        "spanId": span.span_id.hex(),
                        "parentSpanId": span.parent_span_id.hex(),
                        "name": span.name,
                        "kind": trace_pb2.Span.SpanKind.Name(span.kind),
                        "start": span.start_time_unix_nano,
                        "end": span.end_time_unix_nano,
                        "status": trace_pb2.Status.StatusCode.Name(span.status.code),
                        "attributes": {kv.key: value(kv.value) for kv in span.attributes},
                        "events": [event.name for event in span.events],
                        "service": resource.get("service.name"),
                    }))
        with LOCK, open(OUT, "a") as out:
            for line in lines:
                out.write(line + "\n")
        answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


def main():
    server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
    print(server.server_address[1], flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdin.read()
    server.shutdown()


if __name__ == "__main__":
    main()
