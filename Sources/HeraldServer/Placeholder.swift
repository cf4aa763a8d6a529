// The daemon (HTTP API, durable queue, workers) lives here.
