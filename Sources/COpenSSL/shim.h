#ifndef HERALD_COPENSSL_SHIM_H
#define HERALD_COPENSSL_SHIM_H
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ec.h>
#include <openssl/ecdsa.h>
#include <openssl/pem.h>
#include <openssl/pkcs12.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/bio.h>
#include <openssl/rand.h>
#include <openssl/core_names.h>

/* Macros and cast-heavy calls that do not import into Swift. */

static inline void herald_openssl_free(void *p) { OPENSSL_free(p); }

static inline long herald_bio_get_mem_data(BIO *b, char **pp) { return BIO_get_mem_data(b, pp); }

static inline int herald_ssl_ctx_set_min_tls12(SSL_CTX *ctx) { return (int)SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION); }

static inline int herald_ssl_set_sni(SSL *ssl, const char *host) { return (int)SSL_set_tlsext_host_name(ssl, host); }

static inline int herald_ssl_ctx_set_mode(SSL_CTX *ctx, long mode) { return (int)SSL_CTX_set_mode(ctx, mode); }

static inline int herald_ssl_mode_partial_write_moving(void) {
    return (int)(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
}

static inline int herald_stack_x509_num(const STACK_OF(X509) *s) { return sk_X509_num(s); }
static inline X509 *herald_stack_x509_value(const STACK_OF(X509) *s, int i) { return sk_X509_value(s, i); }
static inline void herald_stack_x509_pop_free(STACK_OF(X509) *s) { sk_X509_pop_free(s, X509_free); }

/* ALPN selection on the server: choose "h2" if the client offers it. */
static inline int herald_alpn_select_h2(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                                        const unsigned char *in, unsigned int inlen, void *arg) {
    (void)ssl; (void)arg;
    static const unsigned char h2[] = { 2, 'h', '2' };
    unsigned char *selected = NULL;
    if (SSL_select_next_proto((unsigned char **)&selected, outlen, h2, sizeof(h2), in, inlen) == OPENSSL_NPN_NEGOTIATED) {
        *out = selected;
        return SSL_TLSEXT_ERR_OK;
    }
    return SSL_TLSEXT_ERR_ALERT_FATAL;
}
static inline void herald_ssl_ctx_enable_alpn_h2(SSL_CTX *ctx) {
    SSL_CTX_set_alpn_select_cb(ctx, herald_alpn_select_h2, NULL);
}
#endif
