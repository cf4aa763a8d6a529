-- wrk script: POST /v1/devices registering 2000 devices, 10 for each of users u0…u199, of the
-- app named by HERALD_APP (default com.example.app). Used by scripts/bench.sh and scripts/soak.sh.
local app = os.getenv("HERALD_APP") or "com.example.app"
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local n = 0
request = function()
  n = n + 1
  if n > 2000 then n = 1 end
  return wrk.format(nil, nil, nil, string.format('{"app":"%s","user":"u%d","token":"%064x"}', app, (n - 1) % 200, n + 4096))
end
