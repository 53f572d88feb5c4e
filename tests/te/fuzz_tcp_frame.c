/* Fuzz the TE tcp frame decoder, the server-side request validation and the client-side
 * classification of answers.
 * Input: a stream of 40-byte headers (plus skipped payloads). Every decoded request is checked
 * against a fake table of registered buffers (addresses are never dereferenced); the test
 * asserts the invariants the server relies on. A NOTIFY body that follows an accepted NOTIFY
 * header goes through the server's body parser (mc_te_notify_parse) and must round-trip. */
#include "te/transport.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static mc_te_table_t g_table;
static int g_init;

static mc_te_lbuf_t *fake(uint64_t addr, uint64_t len)
{
    mc_te_lbuf_t *b = calloc(1, sizeof(*b));
    b->addr = addr;
    b->len = len;
    b->shm_fd = -1;
    b->slot = -1;
    return b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_init) {
        mc_te_table_init(&g_table);
        mc_te_table_insert(&g_table, fake(0x10000, 0x1000));
        mc_te_table_insert(&g_table, fake(0x11000, 0x1000)); /* adjacent */
        mc_te_table_insert(&g_table, fake(0x7f0000000000ull, 64ull << 20));
        mc_te_table_insert(&g_table, fake(UINT64_MAX - 0x1fff, 0x1000)); /* top of the space */
        g_init = 1;
    }
    size_t off = 0;
    while (size - off >= MC_TE_FRAME_HDR_SIZE) {
        mc_te_frame_t h;
        if (mc_te_frame_decode(data + off, size - off, &h) != MC_OK)
            break; /* framing lost: the server closes */
        off += MC_TE_FRAME_HDR_SIZE;
        /* round trip */
        uint8_t re[MC_TE_FRAME_HDR_SIZE];
        mc_te_frame_encode(&h, re);
        if (memcmp(re, data + off - MC_TE_FRAME_HDR_SIZE, MC_TE_FRAME_HDR_SIZE) != 0)
            abort();
        /* The client's reading of the same header as the answer to its oldest request; the
         * expectations come from the header's addr bits so that the fuzzer steers them. */
        uint64_t want_id = (h.addr & 1) ? h.id : h.id ^ (h.addr >> 8);
        uint64_t want_len = (h.addr & 2) ? h.length : (h.addr >> 3) & 0xffff;
        bool sent = (h.addr & 4) != 0;
        bool is_resp = (h.opcode & MC_TE_OP_RESPONSE) && h.id == want_id;
        switch (mc_te_frame_classify_response(&h, want_id, want_len, sent)) {
        case MC_TE_RESP_ERROR:
            if (!is_resp || h.status == MC_OK || h.length != 0)
                abort();
            break;
        case MC_TE_RESP_DONE:
        case MC_TE_RESP_DATA:
            if (!is_resp || h.status != MC_OK || !sent || h.length != want_len)
                abort();
            break;
        default: /* BAD: nothing acceptable may be refused */
            if (is_resp && ((h.status != MC_OK && h.length == 0) ||
                            (h.status == MC_OK && sent && h.length == want_len)))
                abort();
        }
        uint64_t payload = 0;
        mc_te_lbuf_t *b = NULL;
        mc_status_t st = mc_te_tcp_check_request(&g_table, &h, &payload, &b);
        if (st == MC_ERR_PROTOCOL) {
            if (b)
                abort();
            break;
        }
        if (st == MC_OK && b) {
            /* the whole range lies inside the one buffer we got */
            if (h.length == 0 || h.addr < b->addr || h.addr - b->addr >= b->len ||
                h.length > b->len - (h.addr - b->addr) || h.length > MC_TE_FRAME_MAX_PAYLOAD)
                abort();
            mc_te_table_release(&g_table, b);
        } else if (b) {
            abort();
        }
        if (payload > MC_TE_FRAME_MAX_PAYLOAD)
            abort();
        if (h.opcode == MC_TE_OP_PROBE && st == MC_OK && (h.addr || h.length || payload))
            abort();
        /* GRANT is unanswered: anything but a well-formed one closes */
        if (h.opcode == MC_TE_OP_GRANT && st != MC_ERR_PROTOCOL &&
            (st != MC_OK || h.addr || h.id || payload != h.length || payload == 0 ||
             payload > MC_TE_FRAME_MAX_GRANT))
            abort();
        if (h.opcode == MC_TE_OP_NOTIFY && st == MC_OK &&
            (payload != h.length || payload > MC_TE_FRAME_MAX_NOTIFY ||
             payload < MC_TE_NOTIFY_HDR || h.addr))
            abort();
        if (payload > size - off)
            break;
        if (h.opcode == MC_TE_OP_NOTIFY && st == MC_OK) {
            const uint8_t *body = data + off;
            const char *name, *msg;
            size_t nl, ml;
            if (mc_te_notify_parse(body, (size_t)payload, &name, &nl, &msg, &ml) == MC_OK) {
                if (nl > MC_TE_NOTIFY_NAME_MAX || ml > MC_TE_NOTIFY_MSG_MAX ||
                    MC_TE_NOTIFY_HDR + nl + ml != payload ||
                    name != (const char *)body + MC_TE_NOTIFY_HDR || msg != name + nl)
                    abort();
                uint8_t *re2 = malloc((size_t)payload);
                if (!re2 || mc_te_notify_encode(re2, name, nl, msg, ml) != payload ||
                    memcmp(re2, body, (size_t)payload) != 0)
                    abort();
                free(re2);
            }
        }
        off += (size_t)payload;
    }
    return 0;
}
