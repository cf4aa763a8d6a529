#ifndef HERALD_CPOSTGRES_SHIM_H
#define HERALD_CPOSTGRES_SHIM_H
#include <libpq-fe.h>
#include <poll.h>

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
#endif
