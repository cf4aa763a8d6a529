// The APNs HTTP/2 transport (libcurl) lives here.
