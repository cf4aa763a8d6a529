#ifndef HERALD_CCURL_SHIM_H
#define HERALD_CCURL_SHIM_H
#include <curl/curl.h>

/* curl_easy_setopt / curl_multi_setopt / curl_easy_getinfo are variadic and do not import
   into Swift: these typed wrappers are the only way Swift code calls them. */

static inline CURLcode herald_curl_easy_setopt_long(CURL *h, CURLoption o, long v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode herald_curl_easy_setopt_string(CURL *h, CURLoption o, const char *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode herald_curl_easy_setopt_pointer(CURL *h, CURLoption o, void *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode herald_curl_easy_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode herald_curl_easy_setopt_blob(CURL *h, CURLoption o, struct curl_blob *v) { return curl_easy_setopt(h, o, v); }

typedef size_t (*herald_curl_data_callback)(char *ptr, size_t size, size_t nmemb, void *userdata);
static inline CURLcode herald_curl_easy_setopt_data_callback(CURL *h, CURLoption o, herald_curl_data_callback cb) { return curl_easy_setopt(h, o, cb); }

typedef int (*herald_curl_closesocket_callback)(void *clientp, curl_socket_t item);
static inline CURLcode herald_curl_easy_setopt_closesocket_callback(CURL *h, herald_curl_closesocket_callback cb) { return curl_easy_setopt(h, CURLOPT_CLOSESOCKETFUNCTION, cb); }

typedef int (*herald_curl_prereq_callback)(void *clientp, char *conn_primary_ip, char *conn_local_ip, int conn_primary_port, int conn_local_port);
static inline CURLcode herald_curl_easy_setopt_prereq_callback(CURL *h, herald_curl_prereq_callback cb) { return curl_easy_setopt(h, CURLOPT_PREREQFUNCTION, cb); }

typedef int (*herald_curl_socket_callback)(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp);
typedef int (*herald_curl_timer_callback)(CURLM *multi, long timeout_ms, void *userp);
static inline CURLMcode herald_curl_multi_setopt_long(CURLM *m, CURLMoption o, long v) { return curl_multi_setopt(m, o, v); }
static inline CURLMcode herald_curl_multi_setopt_pointer(CURLM *m, CURLMoption o, void *v) { return curl_multi_setopt(m, o, v); }
static inline CURLMcode herald_curl_multi_setopt_socket_callback(CURLM *m, herald_curl_socket_callback cb) { return curl_multi_setopt(m, CURLMOPT_SOCKETFUNCTION, cb); }
static inline CURLMcode herald_curl_multi_setopt_timer_callback(CURLM *m, herald_curl_timer_callback cb) { return curl_multi_setopt(m, CURLMOPT_TIMERFUNCTION, cb); }

static inline CURLcode herald_curl_easy_getinfo_long(CURL *h, CURLINFO i, long *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode herald_curl_easy_getinfo_pointer(CURL *h, CURLINFO i, void **v) { return curl_easy_getinfo(h, i, v); }
#endif
