-- wrk script: POST /v1/notifications, each to one of users u0…u199 (10 devices each after
-- register.lua) of the app named by HERALD_APP (default com.example.app), a distinct alert each.
local app = os.getenv("HERALD_APP") or "com.example.app"
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local n = 0
request = function()
  n = n + 1
  return wrk.format(nil, nil, nil, string.format('{"app":"%s","users":["u%d"],"alert":"fan-out %d"}', app, n % 200, n))
end
