-- wrk script: POST /v1/notifications, the same notification to user "solo" (one device).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"app":"com.example.app","users":["solo"],"alert":{"title":"Hello","body":"Benchmark"},"data":{"k":"v"}}'
