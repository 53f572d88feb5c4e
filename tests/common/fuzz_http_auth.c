/* libFuzzer target: the HTTP authentication header parser and the server's check of an
 * Authorization value (and the client's uptake of a WWW-Authenticate value), on arbitrary
 * bytes, with a keyring. */
#include "common/http_auth.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static mc_auth_t *ring;
    static mc_http_auth_server_t *srv;
    if (!ring && mc_auth_from_secret("fuzz-secret-0123456789", NULL, &ring) != MC_OK)
        return 0;
    if (!srv && mc_http_auth_server_create(ring, &srv) != MC_OK)
        return 0;
    char value[MC_HTTP_AUTH_HEADER_MAX + 64];
    size_t n = size < sizeof(value) - 1 ? size : sizeof(value) - 1;
    memcpy(value, data, n);
    value[n] = '\0';
    mc_http_auth_params_t p;
    (void)mc_http_auth_parse(value, &p);
    uint8_t bh[MC_HTTP_AUTH_BODY_HASH_SIZE];
    mc_http_auth_body_hash(data, size, bh);
    char challenge[MC_HTTP_AUTH_CHALLENGE_MAX];
    (void)mc_http_auth_check(srv, value, "PUT", "/metadata?key=k", NULL, NULL, challenge);
    (void)mc_http_auth_check(srv, value, "PUT", "/metadata?key=k", bh, NULL, challenge);
    mc_http_auth_client_t c = MC_HTTP_AUTH_CLIENT_INIT;
    (void)mc_http_auth_client_learn(&c, value);
    char target[64];
    (void)mc_http_auth_target(value, target, sizeof(target));
    return 0;
}
