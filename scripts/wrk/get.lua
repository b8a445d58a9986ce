-- wrk script: GET of PATH (default /partner/v1/balance) with a key's
-- secret (API_KEY). Prints one JSON line.
function init(args)
  wrk.headers["Authorization"] = "Bearer " .. (os.getenv("API_KEY") or "")
  wrk.path = os.getenv("PATH_TO_GET") or "/partner/v1/balance"
end

function done(summary, latency, requests)
  local seconds = summary.duration / 1e6
  io.write(string.format(
    '{"generator":"wrk","path":"%s","requests":%d,"requests_per_second":%.0f,"p50_ms":%.2f,"p99_ms":%.2f,"non_2xx":%d}\n',
    os.getenv("PATH_TO_GET") or "/partner/v1/balance", summary.requests, summary.requests / seconds,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, summary.errors.status))
end
