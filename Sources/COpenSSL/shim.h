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
#include <openssl/x509_vfy.h>
#include <openssl/bio.h>
#include <openssl/rand.h>
#include <openssl/provider.h>
#include <openssl/core_names.h>
#include <openssl/kdf.h>
#include <openssl/param_build.h>
#include <openssl/bn.h>
#include <openssl/rsa.h>
#include <openssl/hmac.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <time.h>

/* Macros and cast-heavy calls that do not import into Swift, plus the few C callbacks
   HeraldCrypto needs (Swift closures must not become C function pointers). */

static inline void herald_openssl_free(void *p) { OPENSSL_free(p); }

static inline long herald_bio_get_mem_data(BIO *b, char **pp) { return BIO_get_mem_data(b, pp); }

static inline int herald_ssl_ctx_set_min_tls12(SSL_CTX *ctx) { return (int)SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION); }

static inline int herald_ssl_set_sni(SSL *ssl, const char *host) { return (int)SSL_set_tlsext_host_name(ssl, host); }

static inline int herald_ssl_ctx_set_mode(SSL_CTX *ctx, long mode) { return (int)SSL_CTX_set_mode(ctx, mode); }
static inline long herald_ssl_ctx_clear_mode(SSL_CTX *ctx, long mode) { return SSL_CTX_clear_mode(ctx, mode); }

static inline int herald_ssl_mode_partial_write_moving(void) {
    return (int)(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
}
static inline long herald_ssl_mode_release_buffers(void) { return (long)SSL_MODE_RELEASE_BUFFERS; }
/* Read whole socket buffers at once instead of a record header and then its body (fewer syscalls). */
static inline void herald_ssl_ctx_set_read_ahead(SSL_CTX *ctx) { SSL_CTX_set_read_ahead(ctx, 1); }

static inline int herald_ssl_ctx_add1_chain_cert(SSL_CTX *ctx, X509 *x) { return (int)SSL_CTX_add1_chain_cert(ctx, x); }

static inline int herald_stack_x509_num(const STACK_OF(X509) *s) { return sk_X509_num(s); }
static inline X509 *herald_stack_x509_value(const STACK_OF(X509) *s, int i) { return sk_X509_value(s, i); }
static inline void herald_stack_x509_pop_free(STACK_OF(X509) *s) { sk_X509_pop_free(s, X509_free); }

/* Once per process: OpenSSL's own init, and SIGPIPE ignored (unless the program installed a
   handler) so that writing to a socket the peer closed gives EPIPE instead of killing us. */
static inline int herald_openssl_init(void) {
    struct sigaction old;
    if (sigaction(SIGPIPE, NULL, &old) == 0 && old.sa_handler == SIG_DFL) {
        signal(SIGPIPE, SIG_IGN);
    }
    return OPENSSL_init_ssl(OPENSSL_INIT_LOAD_SSL_STRINGS | OPENSSL_INIT_LOAD_CRYPTO_STRINGS, NULL);
}

/* PEM private-key reading with a passphrase that never prompts on a terminal. `asked` is set to 1
   when the key turned out to be encrypted (the passphrase callback ran). */
typedef struct { const char *pass; int asked; } herald_pass_state;

static inline int herald_pass_cb(char *buf, int size, int rwflag, void *u) {
    (void)rwflag;
    herald_pass_state *st = (herald_pass_state *)u;
    st->asked = 1;
    if (st->pass == NULL) return -1;
    size_t n = strlen(st->pass);
    if (n > (size_t)size) return -1;
    memcpy(buf, st->pass, n);
    return (int)n;
}

static inline EVP_PKEY *herald_pem_read_private_key(BIO *bio, const char *pass, int *asked) {
    herald_pass_state st = { pass, 0 };
    EVP_PKEY *k = PEM_read_bio_PrivateKey(bio, NULL, herald_pass_cb, &st);
    *asked = st.asked;
    return k;
}

/* Reads the next certificate in a PEM BIO; never prompts. */
static inline X509 *herald_pem_read_x509(BIO *bio) {
    herald_pass_state st = { NULL, 0 };
    return PEM_read_bio_X509(bio, NULL, herald_pass_cb, &st);
}

static inline EVP_PKEY *herald_pem_read_pubkey(BIO *bio) {
    herald_pass_state st = { NULL, 0 };
    return PEM_read_bio_PUBKEY(bio, NULL, herald_pass_cb, &st);
}

/* ASN1_TIME -> seconds since 1970 (UTC). Returns 0 on success. */
static inline int herald_asn1_time_to_unix(const ASN1_TIME *t, long long *out) {
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    if (ASN1_TIME_to_tm(t, &tm) != 1) return -1;
    *out = (long long)timegm(&tm);
    return 0;
}

/* ALPN on the server: the server's protocols in preference order (wire format: length-prefixed),
   and whether a client that offers none of them must fail the handshake. Allocated by
   herald_alpn_config_new, freed by herald_alpn_config_free once the SSL_CTX is gone. */
typedef struct { unsigned char *protos; unsigned int len; int require; } herald_alpn_config;

static inline herald_alpn_config *herald_alpn_config_new(const unsigned char *protos, unsigned int len, int require) {
    herald_alpn_config *c = (herald_alpn_config *)calloc(1, sizeof *c);
    if (c == NULL) return NULL;
    c->protos = (unsigned char *)malloc(len > 0 ? len : 1);
    if (c->protos == NULL) { free(c); return NULL; }
    if (len > 0) memcpy(c->protos, protos, len);
    c->len = len;
    c->require = require;
    return c;
}
static inline void herald_alpn_config_free(herald_alpn_config *c) {
    if (c == NULL) return;
    free(c->protos);
    free(c);
}

static inline int herald_alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                                     const unsigned char *in, unsigned int inlen, void *arg) {
    (void)ssl;
    const herald_alpn_config *c = (const herald_alpn_config *)arg;
    /* Server preference order: the first of ours that the client also offers. */
    for (unsigned int i = 0; i < c->len; i += 1u + c->protos[i]) {
        unsigned int slen = c->protos[i];
        if (i + 1 + slen > c->len) break;
        for (unsigned int j = 0; j < inlen; j += 1u + in[j]) {
            unsigned int clen = in[j];
            if (j + 1 + clen > inlen) break;
            if (clen == slen && memcmp(in + j + 1, c->protos + i + 1, slen) == 0) {
                *out = in + j + 1;
                *outlen = (unsigned char)clen;
                return SSL_TLSEXT_ERR_OK;
            }
        }
    }
    return c->require ? SSL_TLSEXT_ERR_ALERT_FATAL : SSL_TLSEXT_ERR_NOACK;
}

/* With `require`, a ClientHello without any ALPN extension fails too (the select callback above
   only runs when the client sends the extension). */
static inline int herald_client_hello_require_alpn(SSL *ssl, int *alert, void *arg) {
    const herald_alpn_config *c = (const herald_alpn_config *)arg;
    if (c == NULL || !c->require) return SSL_CLIENT_HELLO_SUCCESS;
    const unsigned char *ext = NULL;
    size_t extlen = 0;
    if (SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_application_layer_protocol_negotiation, &ext, &extlen) == 1) {
        return SSL_CLIENT_HELLO_SUCCESS;
    }
    *alert = SSL_AD_NO_APPLICATION_PROTOCOL;
    return SSL_CLIENT_HELLO_ERROR;
}

static inline void herald_ssl_ctx_set_alpn_server(SSL_CTX *ctx, herald_alpn_config *c) {
    SSL_CTX_set_alpn_select_cb(ctx, herald_alpn_select, c);
    if (c->require) SSL_CTX_set_client_hello_cb(ctx, herald_client_hello_require_alpn, c);
}

/* Server-side client-certificate verification: peer must present a certificate. */
static inline void herald_ssl_ctx_require_client_cert(SSL_CTX *ctx) {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
}
static inline void herald_ssl_ctx_verify_peer(SSL_CTX *ctx) { SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL); }

/* Hostname or IP check of the server certificate on a client connection. */
static inline int herald_ssl_set_expected_ip(SSL *ssl, const char *ip) {
    return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), ip);
}
static inline int herald_ssl_set_expected_host(SSL *ssl, const char *host) {
    X509_VERIFY_PARAM *p = SSL_get0_param(ssl);
    X509_VERIFY_PARAM_set_hostflags(p, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    return X509_VERIFY_PARAM_set1_host(p, host, 0);
}

/* The reason of an OpenSSL error code, e.g. ERR_GET_REASON for PKCS#12 MAC failures. */
static inline int herald_err_get_reason(unsigned long e) { return ERR_GET_REASON(e); }
static inline int herald_err_get_lib(unsigned long e) { return ERR_GET_LIB(e); }
/* ---- FCM HTTP v1 and Web Push: RSA key generation, HKDF, raw P-256 keys ----
   OSSL_PARAM arrays point into their arguments, so they are built here, where those pointers
   stay valid for the whole call. */

/* A fresh RSA key of `bits` bits (public exponent 65537), or NULL. */
static inline EVP_PKEY *herald_rsa_generate(unsigned int bits) {
    EVP_PKEY *pkey = NULL;
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, "RSA", NULL);
    if (ctx != NULL && EVP_PKEY_keygen_init(ctx) == 1 && EVP_PKEY_CTX_set_rsa_keygen_bits(ctx, (int)bits) == 1) {
        if (EVP_PKEY_generate(ctx, &pkey) != 1) pkey = NULL;
    }
    EVP_PKEY_CTX_free(ctx);
    return pkey;
}

/* A fresh P-256 key pair, or NULL. */
static inline EVP_PKEY *herald_p256_generate(void) {
    EVP_PKEY *pkey = NULL;
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
    if (ctx != NULL && EVP_PKEY_keygen_init(ctx) == 1 && EVP_PKEY_CTX_set_group_name(ctx, "prime256v1") == 1) {
        if (EVP_PKEY_generate(ctx, &pkey) != 1) pkey = NULL;
    }
    EVP_PKEY_CTX_free(ctx);
    return pkey;
}

/* A key-generation context prepared once for P-256 (EC, keygen_init, group set), so each key
   made with herald_p256_generate_with skips the algorithm fetch and the parameter set-up. Not
   thread-safe: one thread at a time uses it. NULL on failure. */
static inline EVP_PKEY_CTX *herald_p256_keygen_ctx(void) {
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
    if (ctx == NULL) return NULL;
    if (EVP_PKEY_keygen_init(ctx) != 1 || EVP_PKEY_CTX_set_group_name(ctx, "prime256v1") != 1) {
        EVP_PKEY_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

/* A new P-256 key pair from a prepared context, with its encoded public point written to
   `point` (65 bytes). NULL on failure. */
static inline EVP_PKEY *herald_p256_generate_with(EVP_PKEY_CTX *ctx, unsigned char *point, size_t pointlen) {
    EVP_PKEY *pkey = NULL;
    size_t len = 0;
    if (EVP_PKEY_generate(ctx, &pkey) != 1) return NULL;
    if (EVP_PKEY_get_octet_string_param(pkey, OSSL_PKEY_PARAM_ENCODED_PUBLIC_KEY, point, pointlen, &len) != 1 || len != pointlen) {
        EVP_PKEY_free(pkey);
        return NULL;
    }
    return pkey;
}

/* HMAC-SHA256 (RFC 2104) of `a || b` under `key` (at most 64 bytes) with a fetched SHA-256
   `md`: two digests, no MAC fetch or parameter parsing (OpenSSL 3's HMAC() and EVP_KDF look the
   algorithms up on every call). Writes 32 bytes to `out`; returns 1 on success. */
static inline int herald_hmac_sha256(const EVP_MD *md, const unsigned char *key, size_t keylen,
                                     const unsigned char *a, size_t alen, const unsigned char *b, size_t blen,
                                     unsigned char *out) {
    unsigned char pad[64], inner[32];
    unsigned int n = 0;
    size_t i;
    int ok;
    if (md == NULL || keylen > sizeof pad) return 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (ctx == NULL) return 0;
    memset(pad, 0x36, sizeof pad);
    for (i = 0; i < keylen; i++) pad[i] ^= key[i];
    ok = EVP_DigestInit_ex(ctx, md, NULL) == 1 && EVP_DigestUpdate(ctx, pad, sizeof pad) == 1
        && (alen == 0 || EVP_DigestUpdate(ctx, a, alen) == 1) && (blen == 0 || EVP_DigestUpdate(ctx, b, blen) == 1)
        && EVP_DigestFinal_ex(ctx, inner, &n) == 1 && n == 32;
    memset(pad, 0x5c, sizeof pad);
    for (i = 0; i < keylen; i++) pad[i] ^= key[i];
    ok = ok && EVP_DigestInit_ex(ctx, md, NULL) == 1 && EVP_DigestUpdate(ctx, pad, sizeof pad) == 1
        && EVP_DigestUpdate(ctx, inner, sizeof inner) == 1 && EVP_DigestFinal_ex(ctx, out, &n) == 1 && n == 32;
    EVP_MD_CTX_free(ctx);
    OPENSSL_cleanse(pad, sizeof pad);
    OPENSSL_cleanse(inner, sizeof inner);
    return ok;
}

/* HKDF with SHA-256 through EVP_KDF (`kdf` is a fetched "HKDF"). `mode` is one of
   EVP_KDF_HKDF_MODE_EXTRACT_AND_EXPAND, _EXTRACT_ONLY (outlen must be 32) or _EXPAND_ONLY (`key` is
   the PRK). Returns 1 on success. */
static inline int herald_hkdf_sha256(EVP_KDF *kdf, int mode,
                                     const unsigned char *key, size_t keylen,
                                     const unsigned char *salt, size_t saltlen,
                                     const unsigned char *info, size_t infolen,
                                     unsigned char *out, size_t outlen) {
    static const unsigned char empty[1] = { 0 };
    EVP_KDF_CTX *ctx = EVP_KDF_CTX_new(kdf);
    if (ctx == NULL) return 0;
    OSSL_PARAM params[6];
    int n = 0;
    params[n++] = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)"SHA256", 0);
    params[n++] = OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode);
    params[n++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)(key != NULL ? key : empty), keylen);
    if (mode != EVP_KDF_HKDF_MODE_EXPAND_ONLY) {
        params[n++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, (void *)(salt != NULL ? salt : empty), saltlen);
    }
    if (mode != EVP_KDF_HKDF_MODE_EXTRACT_ONLY) {
        params[n++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, (void *)(info != NULL ? info : empty), infolen);
    }
    params[n] = OSSL_PARAM_construct_end();
    int ok = EVP_KDF_derive(ctx, out, outlen, params);
    EVP_KDF_CTX_free(ctx);
    return ok == 1;
}

/* A P-256 key pair from the raw 32-byte private scalar `d` (big-endian); the public point is
   computed from it. `*status` is 1 on success, -1 when d is 0 or not below the group order, 0 on
   an OpenSSL failure. */
static inline EVP_PKEY *herald_p256_from_private(const unsigned char *d, size_t dlen, int *status) {
    EVP_PKEY *pkey = NULL;
    EVP_PKEY_CTX *ctx = NULL;
    OSSL_PARAM_BLD *bld = NULL;
    OSSL_PARAM *params = NULL;
    EC_POINT *pub = NULL;
    unsigned char point[65];
    *status = 0;
    EC_GROUP *group = EC_GROUP_new_by_curve_name(NID_X9_62_prime256v1);
    BIGNUM *priv = BN_secure_new();
    if (group == NULL || priv == NULL || BN_bin2bn(d, (int)dlen, priv) == NULL) goto done;
    if (BN_is_zero(priv) || BN_cmp(priv, EC_GROUP_get0_order(group)) >= 0) { *status = -1; goto done; }
    pub = EC_POINT_new(group);
    if (pub == NULL || EC_POINT_mul(group, pub, priv, NULL, NULL, NULL) != 1) goto done;
    if (EC_POINT_point2oct(group, pub, POINT_CONVERSION_UNCOMPRESSED, point, sizeof point, NULL) != sizeof point) goto done;
    bld = OSSL_PARAM_BLD_new();
    if (bld == NULL
        || OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) != 1
        || OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_PRIV_KEY, priv) != 1
        || OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, point, sizeof point) != 1) goto done;
    params = OSSL_PARAM_BLD_to_param(bld);
    ctx = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
    if (params == NULL || ctx == NULL || EVP_PKEY_fromdata_init(ctx) != 1
        || EVP_PKEY_fromdata(ctx, &pkey, EVP_PKEY_KEYPAIR, params) != 1) { pkey = NULL; goto done; }
    *status = 1;
done:
    EVP_PKEY_CTX_free(ctx);
    OSSL_PARAM_free(params);
    OSSL_PARAM_BLD_free(bld);
    EC_POINT_free(pub);
    BN_clear_free(priv);
    EC_GROUP_free(group);
    OPENSSL_cleanse(point, sizeof point);
    return pkey;
}

/* A P-256 public key from an encoded point (the caller checks that it is the 65-byte uncompressed
   form); NULL unless the point is on the curve and passes EVP_PKEY_public_check. */
static inline EVP_PKEY *herald_p256_from_public(const unsigned char *pt, size_t len) {
    EVP_PKEY *pkey = NULL;
    OSSL_PARAM params[3];
    params[0] = OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, (char *)"prime256v1", 0);
    params[1] = OSSL_PARAM_construct_octet_string(OSSL_PKEY_PARAM_PUB_KEY, (void *)pt, len);
    params[2] = OSSL_PARAM_construct_end();
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
    if (ctx == NULL || EVP_PKEY_fromdata_init(ctx) != 1 || EVP_PKEY_fromdata(ctx, &pkey, EVP_PKEY_PUBLIC_KEY, params) != 1) {
        EVP_PKEY_CTX_free(ctx);
        return NULL;
    }
    EVP_PKEY_CTX_free(ctx);
    EVP_PKEY_CTX *check = EVP_PKEY_CTX_new_from_pkey(NULL, pkey, NULL);
    int ok = check != NULL && EVP_PKEY_public_check(check) == 1;
    EVP_PKEY_CTX_free(check);
    if (!ok) { EVP_PKEY_free(pkey); return NULL; }
    return pkey;
}

/* The encoded public point of an EC key (uncompressed, 65 bytes for P-256); returns its length or 0. */
static inline size_t herald_ec_public_point(const EVP_PKEY *pkey, unsigned char *out, size_t outlen) {
    size_t len = 0;
    if (EVP_PKEY_get_octet_string_param(pkey, OSSL_PKEY_PARAM_ENCODED_PUBLIC_KEY, out, outlen, &len) != 1) return 0;
    return len;
}

/* The private scalar of an EC key, left-padded to `outlen` bytes; returns 1 on success. */
static inline int herald_ec_private_scalar(const EVP_PKEY *pkey, unsigned char *out, size_t outlen) {
    BIGNUM *priv = NULL;
    if (EVP_PKEY_get_bn_param(pkey, OSSL_PKEY_PARAM_PRIV_KEY, &priv) != 1) return 0;
    int ok = BN_bn2binpad(priv, out, (int)outlen) == (int)outlen;
    BN_clear_free(priv);
    return ok;
}

/* ECDH (`EVP_PKEY_derive`) of `priv` with `peer`; returns the secret's length or 0. */
static inline size_t herald_ecdh(EVP_PKEY *priv, EVP_PKEY *peer, unsigned char *out, size_t outlen) {
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_pkey(NULL, priv, NULL);
    size_t len = outlen;
    /* The peer is not checked again here (EVP_PKEY_derive_set_peer would run EVP_PKEY_public_check,
       a full scalar multiplication, on every call): every P256PublicKey passed that check when it
       was made (herald_p256_from_public), and a generated or loaded key is valid by construction. */
    int ok = ctx != NULL && EVP_PKEY_derive_init(ctx) == 1 && EVP_PKEY_derive_set_peer_ex(ctx, peer, 0) == 1
        && EVP_PKEY_derive(ctx, out, &len) == 1;
    EVP_PKEY_CTX_free(ctx);
    return ok ? len : 0;
}

/* AES-128-GCM in one call (`cipher` fetched once, or NULL for the implicit fetch): 12-byte IV, 16-byte tag. `encrypt` 1 seals (writes `tag`), 0 opens
   (checks `tag`). Returns 1 on success, 0 on failure (for opening: authentication failed). */
static inline int herald_aes128gcm(const EVP_CIPHER *cipher, int encrypt, const unsigned char *key, const unsigned char *iv,
                                   const unsigned char *aad, size_t aadlen,
                                   const unsigned char *in, size_t inlen, unsigned char *out, unsigned char *tag) {
    static const unsigned char empty[1] = { 0 };
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    if (ctx == NULL) return 0;
    int ok = 0, len = 0;
    if (inlen > INT_MAX || aadlen > INT_MAX) goto done;
    if (EVP_CipherInit_ex(ctx, cipher != NULL ? cipher : EVP_aes_128_gcm(), NULL, key, iv, encrypt) != 1) goto done;
    if (aadlen > 0 && EVP_CipherUpdate(ctx, NULL, &len, aad, (int)aadlen) != 1) goto done;
    if (EVP_CipherUpdate(ctx, out, &len, in != NULL ? in : empty, (int)inlen) != 1) goto done;
    if (!encrypt && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, 16, (void *)tag) != 1) goto done;
    if (EVP_CipherFinal_ex(ctx, out + len, &len) != 1) goto done;
    if (encrypt && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, tag) != 1) goto done;
    ok = 1;
done:
    EVP_CIPHER_CTX_free(ctx);
    return ok;
}
#endif
