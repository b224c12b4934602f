-- wrk script: POST /v1/sensors with a distinct sensor id per request.
-- Usage (see bench/RESULTS.md): wrk -t2 -c16 -d20s -s bench/wrk/create_sensor.lua http://127.0.0.1:8080
-- LOCKSTREAM_ADMIN_TOKEN must be set in wrk's environment.
local token = os.getenv("LOCKSTREAM_ADMIN_TOKEN")
local threads = {}
local n = 0

function setup(thread)
  n = n + 1
  thread:set("tid", n)
end

function init()
  counter = 0
  prefix = string.format("w%d%x", tid, os.time() % 65536)
end

function request()
  counter = counter + 1
  local body = string.format('{"id":"%s%x","address":"wrk street"}', prefix, counter)
  return wrk.format("POST", "/v1/sensors",
    {["Authorization"] = "Bearer " .. token, ["Content-Type"] = "application/json"}, body)
end

function done(summary, latency, requests)
  io.write(string.format("p50 %.2f ms, p99 %.2f ms, non-2xx %d\n",
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, summary.errors.status))
end
