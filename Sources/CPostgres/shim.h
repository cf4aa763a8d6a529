#ifndef HERALD_CPOSTGRES_SHIM_H
#define HERALD_CPOSTGRES_SHIM_H
#include <libpq-fe.h>
#include <poll.h>
#include <stdint.h>
#include <unistd.h>

/// Typed shims: the enum values libpq returns, as plain ints Swift can compare without casts.
static inline int herald_pq_connection_ok(const PGconn *conn) {
    return conn != NULL && PQstatus(conn) == CONNECTION_OK;
}

/// 1 when a result carries rows (PGRES_TUPLES_OK or PGRES_SINGLE_TUPLE), 2 for a command that
/// succeeded without rows (PGRES_COMMAND_OK), 0 for an error.
static inline int herald_pq_result_kind(const PGresult *res) {
    switch (PQresultStatus(res)) {
    case PGRES_TUPLES_OK: case PGRES_SINGLE_TUPLE: return 1;
    case PGRES_COMMAND_OK: return 2;
    default: return 0;
    }
}

/// The SQLSTATE of an error result ("" when none).
static inline const char *herald_pq_sqlstate(const PGresult *res) {
    const char *s = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    return s ? s : "";
}

/// Waits up to `timeout_ms` for the connection's socket to be readable: 1 readable, 0 timeout, -1 error.
static inline int herald_pq_wait_readable(const PGconn *conn, int timeout_ms) {
    struct pollfd p = { .fd = PQsocket(conn), .events = POLLIN, .revents = 0 };
    if (p.fd < 0) return -1;
    int r = poll(&p, 1, timeout_ms);
    return r < 0 ? -1 : (r > 0 ? 1 : 0);
}

/// Waits up to `timeout_ms` for the connection's socket or `wake_fd` (an eventfd) to be
/// readable: a bitmask (1 the socket, 2 the eventfd, which is drained), 0 on timeout, -1 on error.
static inline int herald_pq_wait_readable_or(const PGconn *conn, int wake_fd, int timeout_ms) {
    struct pollfd p[2] = { { .fd = PQsocket(conn), .events = POLLIN, .revents = 0 },
                           { .fd = wake_fd, .events = POLLIN, .revents = 0 } };
    if (p[0].fd < 0) return -1;
    int r = poll(p, 2, timeout_ms);
    if (r < 0) return -1;
    int bits = (p[0].revents ? 1 : 0) | (p[1].revents & POLLIN ? 2 : 0);
    if (bits & 2) { uint64_t n; (void)!read(wake_fd, &n, sizeof n); }
    return bits;
}
#endif
