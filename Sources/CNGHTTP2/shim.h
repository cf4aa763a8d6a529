#ifndef HERALD_CNGHTTP2_SHIM_H
#define HERALD_CNGHTTP2_SHIM_H
#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <stddef.h>

/* Typed helpers for the APNs HTTP/2 simulator: nghttp2_frame is a union, and building header
   arrays in Swift would allocate per response. */

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

/* An APNs response: ":status" (3 digits), "apns-id", optional "apns-unique-id", and, when
   body_cb is set, "content-type: application/json" with the body from body_cb.
   nghttp2 copies the values; the names are static. The ids change on every response, so they
   are sent as literals without indexing (no churn in the HPACK dynamic table). */
static inline int herald_h2_submit_apns_response(nghttp2_session *s, int32_t stream_id, const uint8_t *status3,
                                                 const uint8_t *apns_id, size_t apns_id_len,
                                                 const uint8_t *unique_id, size_t unique_id_len,
                                                 nghttp2_data_source_read_callback body_cb) {
    static const char json[] = "application/json";
    nghttp2_nv nva[4];
    size_t n = 0;
    nva[n].name = (uint8_t *)":status"; nva[n].namelen = 7;
    nva[n].value = (uint8_t *)status3; nva[n].valuelen = 3; nva[n].flags = NGHTTP2_NV_FLAG_NO_COPY_NAME; n++;
    nva[n].name = (uint8_t *)"apns-id"; nva[n].namelen = 7;
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

/* The data-source flag that ends a body. */
static inline uint32_t herald_h2_data_flag_eof(void) { return NGHTTP2_DATA_FLAG_EOF; }
#endif
