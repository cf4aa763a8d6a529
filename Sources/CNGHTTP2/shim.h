#ifndef HERALD_CNGHTTP2_SHIM_H
#define HERALD_CNGHTTP2_SHIM_H
#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <stddef.h>

/* Typed helpers for the APNs HTTP/2 simulator (server side) and the apns-http2 transport's
   nghttp2 engine (client side): nghttp2_frame and nghttp2_data_source are unions, and building
   header arrays in Swift would allocate per message. */

static inline int32_t herald_h2_frame_stream_id(const nghttp2_frame *f) { return f->hd.stream_id; }

/* Whether the frame opens a request (HEADERS of category REQUEST). */
static inline int herald_h2_is_request_headers(const nghttp2_frame *f) {
    return f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST;
}

/* Whether the frame ends the client's side of a stream (HEADERS or DATA with END_STREAM). */
static inline int herald_h2_ends_stream(const nghttp2_frame *f) {
    return (f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) && (f->hd.flags & NGHTTP2_FLAG_END_STREAM);
}

/* SETTINGS with SETTINGS_MAX_CONCURRENT_STREAMS. */
static inline int herald_h2_submit_max_streams(nghttp2_session *s, uint32_t max_streams) {
    nghttp2_settings_entry iv[1] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, max_streams}};
    return nghttp2_submit_settings(s, NGHTTP2_FLAG_NONE, iv, 1);
}

/* An APNs answer whose id header is named `id_name` (`apns-id`, or `apns-request-id` for broadcasts). */
static inline int herald_h2_submit_apns_response_named(nghttp2_session *s, int32_t stream_id, const uint8_t *status3,
                                                       const char *id_name, size_t id_name_len,
                                                       const uint8_t *apns_id, size_t apns_id_len,
                                                       const uint8_t *unique_id, size_t unique_id_len,
                                                       nghttp2_data_source_read_callback body_cb) {
    static const char json[] = "application/json";
    nghttp2_nv nva[4];
    size_t n = 0;
    nva[n].name = (uint8_t *)":status"; nva[n].namelen = 7;
    nva[n].value = (uint8_t *)status3; nva[n].valuelen = 3; nva[n].flags = NGHTTP2_NV_FLAG_NO_COPY_NAME; n++;
    nva[n].name = (uint8_t *)id_name; nva[n].namelen = id_name_len;
    nva[n].value = (uint8_t *)apns_id; nva[n].valuelen = apns_id_len;
    nva[n].flags = NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_INDEX; n++;
    if (unique_id) {
        nva[n].name = (uint8_t *)"apns-unique-id"; nva[n].namelen = 14;
        nva[n].value = (uint8_t *)unique_id; nva[n].valuelen = unique_id_len;
        nva[n].flags = NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_INDEX; n++;
    }
    if (body_cb) {
        nva[n].name = (uint8_t *)"content-type"; nva[n].namelen = 12;
        nva[n].value = (uint8_t *)json; nva[n].valuelen = sizeof(json) - 1;
        nva[n].flags = NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE; n++;
        nghttp2_data_provider provider;
        provider.source.ptr = NULL;
        provider.read_callback = body_cb;
        return nghttp2_submit_response(s, stream_id, nva, n, &provider);
    }
    return nghttp2_submit_response(s, stream_id, nva, n, NULL);
}

/* An APNs response: ":status" (3 digits), "apns-id", optional "apns-unique-id", and, when
   body_cb is set, "content-type: application/json" with the body from body_cb.
   nghttp2 copies the values; the names are static. The ids change on every response, so they
   are sent as literals without indexing (no churn in the HPACK dynamic table). */
static inline int herald_h2_submit_apns_response(nghttp2_session *s, int32_t stream_id, const uint8_t *status3,
                                                 const uint8_t *apns_id, size_t apns_id_len,
                                                 const uint8_t *unique_id, size_t unique_id_len,
                                                 nghttp2_data_source_read_callback body_cb) {
    return herald_h2_submit_apns_response_named(s, stream_id, status3, "apns-id", 7, apns_id, apns_id_len, unique_id, unique_id_len, body_cb);
}

/* The data-source flag that ends a body. */
static inline uint32_t herald_h2_data_flag_eof(void) { return NGHTTP2_DATA_FLAG_EOF; }

/* ---- Client side (the apns-http2 transport's nghttp2 engine) ---- */

/* A request with a body from read_cb; source_ptr is handed back to read_cb as source->ptr and
   stream_user_data is the stream's user data. Returns the stream id or a negative error. */
static inline int32_t herald_h2_submit_request(nghttp2_session *s, const nghttp2_nv *nva, size_t nvlen,
                                               nghttp2_data_source_read_callback read_cb, void *source_ptr,
                                               void *stream_user_data) {
    nghttp2_data_provider provider;
    provider.source.ptr = source_ptr;
    provider.read_callback = read_cb;
    return nghttp2_submit_request(s, NULL, nva, nvlen, &provider, stream_user_data);
}

/* The client's first SETTINGS: no server push, a 1 MiB stream window (answers are small). */
static inline int herald_h2_submit_client_settings(nghttp2_session *s) {
    nghttp2_settings_entry iv[2] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
                                    {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20}};
    return nghttp2_submit_settings(s, NGHTTP2_FLAG_NONE, iv, 2);
}

/* The server's SETTINGS_MAX_CONCURRENT_STREAMS as this session knows it. */
static inline uint32_t herald_h2_remote_max_streams(nghttp2_session *s) {
    return nghttp2_session_get_remote_settings(s, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
}

/* GOAWAY's last stream id (only for a GOAWAY frame). */
static inline int32_t herald_h2_goaway_last_stream_id(const nghttp2_frame *f) { return f->goaway.last_stream_id; }
static inline uint32_t herald_h2_goaway_error_code(const nghttp2_frame *f) { return f->goaway.error_code; }

/* Whether the frame is a PING acknowledgement. */
static inline int herald_h2_is_ping_ack(const nghttp2_frame *f) {
    return f->hd.type == NGHTTP2_PING && (f->hd.flags & NGHTTP2_FLAG_ACK);
}

/* Whether the frame is a response's HEADERS (not trailers or a 1xx we ignore). */
static inline int herald_h2_is_response_headers(const nghttp2_frame *f) {
    return f->hd.type == NGHTTP2_HEADERS && (f->headers.cat == NGHTTP2_HCAT_RESPONSE || f->headers.cat == NGHTTP2_HCAT_HEADERS);
}

static inline int herald_h2_is_goaway(const nghttp2_frame *f) { return f->hd.type == NGHTTP2_GOAWAY; }

/* PING with 8 zero bytes. */
static inline int herald_h2_submit_ping(nghttp2_session *s) { return nghttp2_submit_ping(s, NGHTTP2_FLAG_NONE, NULL); }

/* Header flags: name and value not copied (the caller keeps them alive until the stream
   closes), and optionally never indexed (values that change with every request). */
static inline uint8_t herald_h2_nv_flags(int index) {
    return NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE | (index ? 0 : NGHTTP2_NV_FLAG_NO_INDEX);
}
#endif
