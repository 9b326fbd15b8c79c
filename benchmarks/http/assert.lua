-- wrk script for benchmarks/http/run.sh: POST /api/appattest/assert over pre-signed bodies.
--
-- Run with as many threads as connections (wrk -t N -c N): each thread has one connection and
-- one key, and sends that key's bodies in order (counters ascending), one request at a time.
-- usage: wrk -t N -c N -d 15s -s assert.lua URL -- DIRECTORY
--   DIRECTORY holds bodies-0.json ... bodies-(N-1).json, one request body per line.
-- Prints one JSON line: requests, duration, latency percentiles (µs), wrk's error counts, and
-- how many connections ran out of bodies (then the figures are not valid: prepare more).

local threads = {}
local next_id = 0

function setup(thread)
    thread:set("id", next_id)
    next_id = next_id + 1
    table.insert(threads, thread)
end

function init(args)
    bodies = {}
    for line in io.lines(args[1] .. "/bodies-" .. id .. ".json") do
        bodies[#bodies + 1] = line
    end
    sent = 0
    exhausted = 0
    headers = { ["Content-Type"] = "application/json" }
end

function request()
    sent = sent + 1
    if sent > #bodies then
        -- Never resend a body (it would be a replay): stop this connection and say so.
        exhausted = 1
        wrk.thread:stop()
        return wrk.format("GET", "/healthz")
    end
    return wrk.format("POST", "/api/appattest/assert", headers, bodies[sent])
end

function done(summary, latency, requests)
    local ran_out = 0
    for _, thread in ipairs(threads) do
        ran_out = ran_out + (thread:get("exhausted") or 0)
    end
    local errors = summary.errors
    io.write(string.format(
        '{"requests":%d,"durationMicroseconds":%d,"p50Microseconds":%d,"p90Microseconds":%d,"p99Microseconds":%d,' ..
        '"maxMicroseconds":%d,"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},"exhaustedConnections":%d}\n',
        summary.requests, summary.duration, latency:percentile(50), latency:percentile(90), latency:percentile(99),
        latency.max, errors.connect, errors.read, errors.write, errors.status, errors.timeout, ran_out))
end
