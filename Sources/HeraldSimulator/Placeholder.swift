// The APNs simulators (HTTP/2, binary, feedback) live here.
