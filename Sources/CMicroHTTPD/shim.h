#ifndef HERALD_CMICROHTTPD_SHIM_H
#define HERALD_CMICROHTTPD_SHIM_H
#include <sys/types.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdint.h>
#include <stdarg.h>
#include <string.h>
#include <microhttpd.h>

/* MHD_start_daemon is variadic and does not import into Swift: these typed wrappers pass each
   option with exactly the type libmicrohttpd reads (unsigned int vs size_t matters). */

/** Options of herald_mhd_start. */
typedef struct herald_mhd_options {
    /** The address to bind (IPv4 or IPv6), with its length. */
    const struct sockaddr *address;
    socklen_t address_length;
    unsigned int connection_limit;
    /** Idle connections are closed after this many seconds (0: never). */
    unsigned int connection_timeout;
    /** Memory per connection for headers and buffers, in bytes. */
    size_t connection_memory_limit;
    /** The listen socket's backlog (the kernel caps it at net.core.somaxconn). */
    unsigned int listen_backlog;
} herald_mhd_options;

typedef size_t (*herald_mhd_unescape_callback)(void *cls, struct MHD_Connection *connection, char *s);

/** Called on the server thread once a request line has arrived (before its headers); returns the
    request's initial context (Herald returns NULL). */
typedef void *(*herald_mhd_request_line_callback)(void *cls, const char *uri, struct MHD_Connection *connection);

/** Called on the server thread for each accepted socket, before any byte is read: MHD_NO closes it. */
typedef enum MHD_Result (*herald_mhd_accept_callback)(void *cls, const struct sockaddr *address, socklen_t length);

/** Where the daemon's messages that Herald acts on go (see herald_mhd_log). */
typedef struct herald_mhd_log_target {
    /** Called on the server thread when libmicrohttpd is about to refuse a request for its
        Content-Length (not digits, or more than 64 bits), before it queues its own answer. */
    void (*length_refused)(void *cls);
    void *cls;
} herald_mhd_log_target;

/** libmicrohttpd's logger: every message but the Content-Length refusals is dropped.
    libmicrohttpd 0.9.75 answers a request whose Content-Length is malformed ("abc", "-1") or
    does not fit 64 bits with its own 400 or 413, and writes that answer's status line and headers
    twice (transmit_error_response_len builds them, then the START_REPLY state builds them again),
    the second copy inside the body. No callback of the library runs for that request; its log
    message, written just before, is the one place Herald hears of it (parse_connection_headers). */
static inline void herald_mhd_log(void *cls, const char *format, va_list ap) {
    (void)ap;
    const herald_mhd_log_target *target = (const herald_mhd_log_target *)cls;
    if (target == NULL || format == NULL) return;
    if (strstr(format, "Content-Length' header. Closing connection.") != NULL) target->length_refused(target->cls);
}

/** Starts a daemon with one internal polling thread, suspend/resume, Herald's callbacks, and no
    listening socket of its own: Herald's acceptor thread (HTTPAcceptor) accepts and hands each
    connection over with herald_mhd_add_connection (thread-safe in 0.9.75 with an internal thread:
    the connection is queued under a mutex, the thread is woken through its inter-thread channel,
    and every queued connection is taken in one loop). The library's own accept takes one
    connection per loop of its poll thread, and each loop polls every connection: N connections
    arriving at once cost O(N^2), and past the listen backlog the kernel drops SYNs, which costs
    their clients a second each (measured in docs/benchmarks.md, "A reconnect storm").

    poll(), not epoll. libmicrohttpd 0.9.75's MHD_epoll() drains events with
    `while (MAX_EVENTS == num_events) epoll_wait(..., MAX_EVENTS (128), timeout_ms)` where timeout_ms
    is computed once, before the loop: when one call returns exactly 128 events, the next call
    blocks (edge-triggered: the 128 are not reported again) until an unrelated event or the
    earliest connection timeout, before any of them is processed. Hence the stall at 128 (and
    256, ...) ready connections: 127 connections 34k req/s, 128 connections 48 req/s, 129 19k,
    256 230 (minimal C handler, wrk); poll() serves 51k at 128. No start flag avoids it; an outer
    epoll driving MHD_run() does, but measured below poll(). poll() costs what the *active*
    connections cost: idle streams are suspended, and suspended connections are not polled
    (10,000 open streams: /healthz p99 well under a millisecond to 24 ms on a loaded machine;
    docs/benchmarks.md). The options' address and backlog are the listening socket's
    (herald_listen_socket). */
static inline struct MHD_Daemon *herald_mhd_start(const herald_mhd_options *o,
                                                           MHD_AccessHandlerCallback access, void *access_cls,
                                                           MHD_RequestCompletedCallback completed, void *completed_cls,
                                                           MHD_NotifyConnectionCallback notify, void *notify_cls,
                                                           herald_mhd_unescape_callback unescape, void *unescape_cls,
                                                           herald_mhd_request_line_callback request_line, void *request_line_cls,
                                                           herald_mhd_accept_callback accept, void *accept_cls,
                                                           const herald_mhd_log_target *log) {
    unsigned int flags = MHD_USE_POLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG
                       | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
    return MHD_start_daemon(flags, 0, accept, accept_cls, access, access_cls,
                            MHD_OPTION_EXTERNAL_LOGGER, herald_mhd_log, (void *)log,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned int)o->connection_limit,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)o->connection_timeout,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)o->connection_memory_limit,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, completed_cls,
                            MHD_OPTION_NOTIFY_CONNECTION, notify, notify_cls,
                            MHD_OPTION_UNESCAPE_CALLBACK, unescape, unescape_cls,
                            MHD_OPTION_URI_LOG_CALLBACK, request_line, request_line_cls,
                            MHD_OPTION_END);
}

/** Hands an accepted socket to a daemon started with herald_mhd_start (from any thread);
    returns 1 when it took it (on 0 the library has closed the socket). */
static inline int herald_mhd_add_connection(struct MHD_Daemon *d, int fd, const struct sockaddr *address, socklen_t length) {
    return MHD_add_connection(d, fd, address, length) == MHD_YES ? 1 : 0;
}

/** Creates a listening TCP socket (non-blocking, close-on-exec, SO_REUSEADDR; IPv6 only for an
    IPv6 address) bound to `address`; returns it, or -1 with errno set. */
static inline int herald_listen_socket(const struct sockaddr *address, socklen_t length, int backlog) {
    int fd = socket(address->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (address->sa_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, address, length) != 0 || listen(fd, backlog) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

/** Accepts one connection (non-blocking, close-on-exec); -1 with errno EAGAIN when none waits. */
static inline int herald_accept(int listener, struct sockaddr_storage *address, socklen_t *length) {
    *length = sizeof *address;
    int fd = accept(listener, (struct sockaddr *)address, length);
    if (fd < 0) return -1;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    return fd;
}

/** Copies up to `length` waiting bytes without taking them; what recv() returns. */
static inline ssize_t herald_peek(int fd, void *bytes, size_t length) {
    return recv(fd, bytes, length, MSG_PEEK | MSG_DONTWAIT);
}

/** The port a socket is bound to, or 0. */
static inline int herald_socket_port(int fd) {
    struct sockaddr_storage a;
    socklen_t length = sizeof a;
    if (getsockname(fd, (struct sockaddr *)&a, &length) != 0) return 0;
    if (a.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&a)->sin_port);
    if (a.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&a)->sin6_port);
    return 0;
}

/** Writes `length` bytes to a socket without blocking or SIGPIPE; returns what send() returns. */
static inline ssize_t herald_send_now(int fd, const void *bytes, size_t length) {
    return send(fd, bytes, length, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/** Iterates every request header (name as the client sent it, value). */
static inline int herald_mhd_headers(struct MHD_Connection *c, MHD_KeyValueIterator iterator, void *cls) {
    return MHD_get_connection_values(c, MHD_HEADER_KIND, iterator, cls);
}

/** A request header's value, or NULL. */
static inline const char *herald_mhd_header(struct MHD_Connection *c, const char *name) {
    return MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
}

/** Iterates the query arguments (`?a=b&c=d`), still percent-encoded. */
static inline int herald_mhd_query_arguments(struct MHD_Connection *c, MHD_KeyValueIterator iterator, void *cls) {
    return MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, iterator, cls);
}

/** Header pairs for herald_mhd_respond, NULL-terminated by name. */
typedef struct herald_mhd_header_pair {
    const char *name;
    const char *value;
} herald_mhd_header_pair;

/** Queues a response with a copied body and headers; returns 1 on success. */
static inline int herald_mhd_respond(struct MHD_Connection *c, unsigned int status, const void *body, size_t length,
                                     const herald_mhd_header_pair *headers, size_t header_count) {
    struct MHD_Response *r = MHD_create_response_from_buffer(length, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (r == NULL) return 0;
    for (size_t i = 0; i < header_count; i++) {
        MHD_add_response_header(r, headers[i].name, headers[i].value);
    }
    enum MHD_Result result = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return result == MHD_YES ? 1 : 0;
}

/** The content reader of a streaming response: bytes copied into `buffer` (at most `max`), 0 after
    suspending the connection (nothing to send yet), -1 to end the stream cleanly (the chunked
    terminator follows), -2 to close the connection at once. */
typedef ssize_t (*herald_mhd_stream_reader)(void *cls, uint64_t position, char *buffer, size_t max);

/** Queues a streaming response of unknown size (chunked on HTTP/1.1) whose body comes from
    `reader`; `release` is called once, on the server thread, when the connection is done with it
    (sent, client gone, or daemon stopping), before its socket is closed. Returns 1 on success;
    0 when the response could not be queued (then `release` has already been called). */
static inline int herald_mhd_respond_stream(struct MHD_Connection *c, unsigned int status,
                                            const herald_mhd_header_pair *headers, size_t header_count,
                                            size_t block_size, herald_mhd_stream_reader reader, void *cls,
                                            void (*release)(void *cls)) {
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, block_size, reader, cls, release);
    if (r == NULL) {
        release(cls);
        return 0;
    }
    for (size_t i = 0; i < header_count; i++) {
        MHD_add_response_header(r, headers[i].name, headers[i].value);
    }
    enum MHD_Result result = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return result == MHD_YES ? 1 : 0;
}

/** Sets this connection's idle timeout in seconds (0: never), e.g. for a long-lived stream. */
static inline void herald_mhd_set_connection_timeout(struct MHD_Connection *c, unsigned int seconds) {
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, seconds);
}

/** Caps the kernel's send buffer of the connection's socket (no autotuning past it). */
static inline void herald_mhd_set_send_buffer(struct MHD_Connection *c, int bytes) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (info) setsockopt(info->connect_fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
}

/** The connection's socket, or -1. */
static inline int herald_mhd_connection_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info ? (int)info->connect_fd : -1;
}

/** The peer of a socket address as 16 bytes (an IPv4 address, or an IPv4-mapped IPv6 one, in
    ::ffff:a.b.c.d form); returns 4 for IPv4, 6 for IPv6, 0 for another family. */
static inline int herald_sockaddr_peer(const struct sockaddr *a, uint8_t out[16]) {
    memset(out, 0, 16);
    if (a == NULL) return 0;
    if (a->sa_family == AF_INET) {
        out[10] = 0xff; out[11] = 0xff;
        memcpy(out + 12, &((const struct sockaddr_in *)a)->sin_addr, 4);
        return 4;
    }
    if (a->sa_family == AF_INET6) {
        memcpy(out, &((const struct sockaddr_in6 *)a)->sin6_addr, 16);
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        return memcmp(out, mapped, 12) == 0 ? 4 : 6;
    }
    return 0;
}

/** The client's address of a connection (see herald_sockaddr_peer). */
static inline int herald_mhd_client_address(struct MHD_Connection *c, uint8_t out[16]) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    return herald_sockaddr_peer(info ? info->client_addr : NULL, out);
}

/** MHD_YES / MHD_NO as plain ints for Swift callbacks. */
static inline enum MHD_Result herald_mhd_result(int ok) { return ok ? MHD_YES : MHD_NO; }

/** Resumes a suspended connection (thread-safe with MHD_ALLOW_SUSPEND_RESUME). */
static inline void herald_mhd_resume(struct MHD_Connection *c) { MHD_resume_connection(c); }
static inline void herald_mhd_suspend(struct MHD_Connection *c) { MHD_suspend_connection(c); }

#endif
