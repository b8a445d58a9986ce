-- wrk script: POST /partner/v1/orders with a unique Idempotency-Key per
-- request (run prefix, thread number, counter). API_KEY: a live key's
-- secret, or KEYS_FILE: a file of live keys' secrets, one per line, taken in
-- turn (many partners); PLAN_ID: the plan (default pl_fr_1gb_7d);
-- QUANTITY: units an order (default 1, at most 50);
-- KEY_STYLE=random: keys as the generated clients make them (a random UUID
-- after a prefix) instead of counting up. PARTNER_ORDER=random: each request
-- from a partner drawn at random from KEYS_FILE instead of in turn (in turn,
-- neighbours in the file, made one after another and so neighbours in every
-- index ordered by partner, share commits). Prints one JSON line.
local threads = {}
local run = os.getenv("RUN") or tostring(os.time())

function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  counter = 0
  statuses = {}
  keys = {}
  local file = os.getenv("KEYS_FILE")
  if file then
    for line in io.lines(file) do
      if #line > 0 then table.insert(keys, line) end
    end
  end
  wrk.method = "POST"
  wrk.headers["Authorization"] = "Bearer " .. (os.getenv("API_KEY") or "")
  wrk.headers["Content-Type"] = "application/json"
  random_keys = os.getenv("KEY_STYLE") == "random"
  random_partners = os.getenv("PARTNER_ORDER") == "random"
  math.randomseed(os.time() * 1000 + tid)
  wrk.body = '{"plan_id":"' .. (os.getenv("PLAN_ID") or "pl_fr_1gb_7d") .. '","quantity":' .. (os.getenv("QUANTITY") or "1") .. '}'
end

function request()
  counter = counter + 1
  if #keys > 0 and random_partners then
    wrk.headers["Authorization"] = "Bearer " .. keys[math.random(#keys)]
  elseif #keys > 0 then
    -- Each thread starts at its own place in the list, so that the threads
    -- do not march through the partners in step.
    wrk.headers["Authorization"] = "Bearer " .. keys[((counter + tid * 7919) % #keys) + 1]
  end
  if random_keys then
    wrk.headers["Idempotency-Key"] = string.format("wrk-%08x-%04x-4%03x-%04x-%04x%08x",
      math.random(0, 0xffffffff), math.random(0, 0xffff), math.random(0, 0xfff),
      math.random(0x8000, 0xbfff), math.random(0, 0xffff), math.random(0, 0xffffffff))
  else
    wrk.headers["Idempotency-Key"] = string.format("wrk-%s-%d-%010d", run, tid, counter)
  end
  return wrk.format(nil, "/partner/v1/orders")
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local by = {}
  for _, thread in ipairs(threads) do
    local s = thread:get("statuses")
    for code, n in pairs(s) do by[code] = (by[code] or 0) + n end
  end
  local parts = {}
  for code, n in pairs(by) do table.insert(parts, string.format('"%d":%d', code, n)) end
  local seconds = summary.duration / 1e6
  io.write(string.format(
    '{"generator":"wrk","requests":%d,"seconds":%.2f,"requests_per_second":%.0f,"accepted_per_second":%.0f,"p50_ms":%.2f,"p99_ms":%.2f,"p999_ms":%.2f,"max_ms":%.2f,"errors":%d,"statuses":{%s}}\n',
    summary.requests, seconds, summary.requests / seconds, (by[202] or 0) / seconds,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    latency:percentile(99.9) / 1000, latency.max / 1000,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout + summary.errors.status,
    table.concat(parts, ",")))
end
