/* libFuzzer target: the authentication handshake's parsers (server check of a PROOF, client
 * check of a HELLO and a RESULT) and the hex decoder, with and without a keyring. */
#include "common/auth.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static mc_auth_t *ring;
    if (!ring && mc_auth_from_secret("fuzz-secret-0123456789", NULL, &ring) != MC_OK)
        return 0;
    uint8_t buf[MC_AUTH_PROOF_SIZE + MC_AUTH_HELLO_SIZE] = {0};
    memcpy(buf, data, size < sizeof(buf) ? size : sizeof(buf));
    const mc_auth_t *rings[2] = {NULL, ring};
    for (int i = 0; i < 2; i++) {
        mc_auth_server_hs_t hs;
        uint8_t hello[MC_AUTH_HELLO_SIZE], result[MC_AUTH_RESULT_SIZE], proof[MC_AUTH_PROOF_SIZE];
        uint8_t cn[MC_AUTH_NONCE_SIZE];
        mc_auth_server_hello(rings[i], &hs, hello);
        (void)mc_auth_server_check(rings[i], &hs, buf, result, NULL);
        if (mc_auth_client_proof(rings[i], buf, cn, proof) == MC_OK)
            (void)mc_auth_client_result(rings[i], buf, cn, buf + MC_AUTH_HELLO_SIZE - MC_AUTH_RESULT_SIZE);
    }
    char hex[2 * MC_AUTH_MAC_SIZE + 1];
    size_t n = size < sizeof(hex) - 1 ? size : sizeof(hex) - 1;
    memcpy(hex, data, n);
    hex[n] = '\0';
    uint8_t mac[MC_AUTH_MAC_SIZE];
    (void)mc_auth_unhex(hex, mac, sizeof(mac));
    return 0;
}
