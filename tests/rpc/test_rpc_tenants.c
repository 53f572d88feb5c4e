/* Tenants on the master RPC port, against an in-process master with a keyring of one cluster
 * token and two tenant-bound tokens (a, b): a tenant token sees and touches nothing of another
 * tenant (get, exist, size, list, events, remove, RemoveAll, RemoveByRegex), a request naming
 * another tenant is refused, the same key in two tenants is two objects, default-tenant
 * clients see none of the tenants' keys, a cluster token acts for the tenant it names, keys
 * starting with byte 0x01 and invalid tenant names are refused; replica tasks act on the
 * caller's tenant's keys and are seen only by it, their owner's calls refused to tenant
 * tokens (docs/internals/master.md, "Tenants", "Replica tasks"); answers handing out replicas
 * to a tenant-bound token carry data grants, the placement feed's too (docs/security.md,
 * "Data ports and tenants"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/auth.h"
#include "common/grant.h"
#include "common/time.h"
#include "master/service.h"
#include "rpc/frame.h"
#include "rpc/rpc_client.h"
#include "rpc/wire_key.h"
#include "master_fixture.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SECRET_C "cluster-secret-C-0123456789"
#define SECRET_A "tenant-secret-A-0123456789"
#define SECRET_B "tenant-secret-B-0123456789"

typedef struct world {
    mc_auth_t *srv, *ka, *kb, *kc;
    mc_rpc_client_t *a, *b, *admin; /* tenant a, tenant b, cluster token */
} world_t;

static mc_auth_t *ring(const char *secret, const char *tenant)
{
    mc_auth_t *r = NULL;
    assert_int_equal(mc_auth_from_secret(secret, tenant, &r), MC_OK);
    return r;
}

static mc_auth_t *ring_file(const char *text) { return fixture_ring_file(text); }

static mc_rpc_client_t *client(fixture_t *f, const mc_auth_t *auth)
{
    return fixture_client(f, auth);
}

/* Header-level status when refused, else the body's status (first field of every answer). */
static mc_status_t call(mc_rpc_client_t *c, uint16_t op, const ProtobufCMessage *q,
                        ProtobufCMessage **resp_p)
{
    ProtobufCMessage *resp = NULL;
    mc_status_t st = mc_rpc_client_call(c, op, q, &resp, 2000);
    if (st != MC_OK)
        return st;
    /* every answer used here starts with `sint32 status = 1` */
    const ProtobufCFieldDescriptor *fd =
        protobuf_c_message_descriptor_get_field_by_name(resp->descriptor, "status");
    assert_non_null(fd);
    st = *(const int32_t *)((const char *)resp + fd->offset);
    if (resp_p)
        *resp_p = resp;
    else
        mc_rpc_response_free(resp);
    return st;
}

/* PutStart + PutEnd of a size-byte value in tenant t ("" = the token's or "default"). */
static mc_status_t put(mc_rpc_client_t *c, const char *t, const char *key, uint64_t size)
{
    McRpc__PutStartRequest ps = MC_RPC__PUT_START_REQUEST__INIT;
    ps.client_id = (ProtobufCBinaryData){16, CID};
    ps.tenant_id = (char *)t;
    ps.key = mc_wire_key_str(key);
    ps.value_size = size;
    mc_status_t st = call(c, MC_OP_PUT_START, &ps.base, NULL);
    if (st != MC_OK)
        return st;
    McRpc__PutEndRequest pe = MC_RPC__PUT_END_REQUEST__INIT;
    pe.client_id = (ProtobufCBinaryData){16, CID};
    pe.tenant_id = (char *)t;
    pe.key = mc_wire_key_str(key);
    return call(c, MC_OP_PUT_END, &pe.base, NULL);
}

static mc_status_t key_op(mc_rpc_client_t *c, uint16_t op, const char *t, const char *key)
{
    McRpc__KeyRequest q = MC_RPC__KEY_REQUEST__INIT;
    q.client_id = (ProtobufCBinaryData){16, CID};
    q.tenant_id = (char *)t;
    q.key = mc_wire_key_str(key);
    q.force = true;
    return call(c, op, &q.base, NULL);
}

/* The object's size, or 0 when GetSize fails. */
static uint64_t size_of(mc_rpc_client_t *c, const char *t, const char *key)
{
    McRpc__KeyRequest q = MC_RPC__KEY_REQUEST__INIT;
    q.tenant_id = (char *)t;
    q.key = mc_wire_key_str(key);
    ProtobufCMessage *resp = NULL;
    if (call(c, MC_OP_GET_SIZE, &q.base, &resp) != MC_OK) {
        mc_rpc_response_free(resp); /* a body status other than OK still came with a body */
        return 0;
    }
    uint64_t n = ((McRpc__GetSizeResponse *)resp)->size;
    mc_rpc_response_free(resp);
    return n;
}

/* BatchExistKey of keys[0..n): how many exist. */
static size_t batch_exist(mc_rpc_client_t *c, const char *t, const char *const *keys, size_t n)
{
    McRpc__BatchKeyRequest q = MC_RPC__BATCH_KEY_REQUEST__INIT;
    q.tenant_id = (char *)t;
    q.n_keys = n;
    q.keys = mc_wire_keys(keys, n);
    ProtobufCMessage *resp = NULL;
    assert_int_equal(call(c, MC_OP_BATCH_EXIST_KEY, &q.base, &resp), MC_OK);
    McRpc__BatchStatusResponse *r = (void *)resp;
    size_t found = 0;
    for (size_t i = 0; i < r->n_statuses; i++)
        found += r->statuses[i] == MC_OK;
    mc_rpc_response_free(resp);
    mc_free(q.keys);
    return found;
}

/* ListObjects over all pages: the listed keys, newline-separated, sorted by the caller's
 * expectations (order is the table's); returns the count, or a negative status. */
static long list(mc_rpc_client_t *c, const char *t, char *out, size_t cap)
{
    out[0] = 0;
    long n = 0;
    uint64_t cursor = 0;
    for (;;) {
        McRpc__ListObjectsRequest q = MC_RPC__LIST_OBJECTS_REQUEST__INIT;
        q.tenant_id = (char *)t;
        q.cursor = cursor;
        q.max = 2; /* several pages */
        ProtobufCMessage *resp = NULL;
        mc_status_t st = call(c, MC_OP_LIST_OBJECTS, &q.base, &resp);
        if (st != MC_OK)
            return st;
        McRpc__ListObjectsResponse *r = (void *)resp;
        for (size_t i = 0; i < r->n_objects; i++) {
            size_t len = strlen(out);
            snprintf(out + len, cap - len, "%.*s\n", (int)r->objects[i]->key.len,
                     (const char *)r->objects[i]->key.data);
            n++;
        }
        bool done = r->done;
        cursor = r->next_cursor;
        mc_rpc_response_free(resp);
        if (done)
            return n;
    }
}

/* Whether key is a line of a list() text. */
static bool listed(const char *text, const char *key)
{
    size_t n = strlen(key);
    for (const char *p = text; (p = strstr(p, key)) != NULL; p++)
        if ((p == text || p[-1] == '\n') && p[n] == '\n')
            return true;
    return false;
}

/* PollEvents from seq 1 (no wait): checks that seqs are consecutive, that other tenants'
 * events carry nothing (kind UNDEFINED, no key, size, segment or host) and that no key
 * carries the internal tenant mark; counts COMMITTED events whose key starts with prefix
 * (NULL = any). Returns that count or a negative status. */
static long poll_committed(mc_rpc_client_t *c, const char *t, const char *prefix, bool feed)
{
    McRpc__PollEventsRequest q = MC_RPC__POLL_EVENTS_REQUEST__INIT;
    q.tenant_id = (char *)t;
    q.from_seq = 1;
    q.with_placements = feed;
    ProtobufCMessage *resp = NULL;
    mc_status_t st = call(c, MC_OP_POLL_EVENTS, &q.base, &resp);
    if (st != MC_OK)
        return st;
    McRpc__PollEventsResponse *r = (void *)resp;
    assert_false(r->gap);
    long n = 0;
    for (size_t i = 0; i < r->n_events; i++) {
        const McRpc__KvEvent *e = r->events[i];
        assert_int_equal(e->seq, i + 1);
        if (e->kind == MC_RPC__KV_EVENT_KIND__KV_EVENT_UNDEFINED) {
            assert_int_equal(e->key.len, 0);
            assert_int_equal(e->size, 0);
            assert_string_equal(e->segment, "");
            assert_string_equal(e->host, "");
            assert_null(e->placement);
            continue;
        }
        assert_true(e->key.len > 0);
        assert_int_not_equal(e->key.data[0], 0x01);
        if (e->kind == MC_RPC__KV_EVENT_KIND__KV_EVENT_COMMITTED &&
            (!prefix || (e->key.len >= strlen(prefix) &&
                         memcmp(e->key.data, prefix, strlen(prefix)) == 0))) {
            n++;
            if (feed)
                assert_non_null(e->placement); /* still readable: a placement with a lease */
        }
    }
    mc_rpc_response_free(resp);
    return n;
}

static mc_status_t remove_all(mc_rpc_client_t *c, const char *t, uint64_t *n_p)
{
    McRpc__RemoveAllRequest q = MC_RPC__REMOVE_ALL_REQUEST__INIT;
    q.tenant_id = (char *)t;
    q.force = true;
    ProtobufCMessage *resp = NULL;
    mc_status_t st = call(c, MC_OP_REMOVE_ALL, &q.base, &resp);
    if (st == MC_OK) {
        *n_p = ((McRpc__CountResponse *)resp)->count;
        mc_rpc_response_free(resp);
    }
    return st;
}

static mc_status_t remove_regex(mc_rpc_client_t *c, const char *t, const char *re, uint64_t *n_p)
{
    McRpc__RemoveByRegexRequest q = MC_RPC__REMOVE_BY_REGEX_REQUEST__INIT;
    q.tenant_id = (char *)t;
    q.pattern = (char *)re;
    q.force = true;
    ProtobufCMessage *resp = NULL;
    mc_status_t st = call(c, MC_OP_REMOVE_BY_REGEX, &q.base, &resp);
    if (st == MC_OK) {
        *n_p = ((McRpc__CountResponse *)resp)->count;
        mc_rpc_response_free(resp);
    }
    return st;
}

static world_t W; /* the clients of the current test's master */

/* Master with the cluster token and tenant tokens a, b; a segment; per tenant:
 *   default: "shared" (1000 B), "d1"
 *   a:       "shared" (2000 B), "a1", "a2"
 *   b:       "shared" (3000 B), "b1", "x-b" */
static int setup_world(void **state)
{
    memset(&W, 0, sizeof(W));
    W.srv = ring_file(SECRET_C "\n" SECRET_A " tenant=a\n" SECRET_B " tenant=b\n");
    W.kc = ring(SECRET_C, NULL);
    W.ka = ring(SECRET_A, "a");
    W.kb = ring(SECRET_B, "b");
    assert_int_equal(fixture_start_with(state, 0, W.srv, NULL), 0);
    fixture_t *f = *state;
    W.admin = client(f, W.kc);
    W.a = client(f, W.ka);
    W.b = client(f, W.kb);
    mount_seg_labelled(W.admin, "h");
    assert_int_equal(put(W.admin, "", "shared", 1000), MC_OK);
    assert_int_equal(put(W.admin, "", "d1", 100), MC_OK);
    assert_int_equal(put(W.a, "", "shared", 2000), MC_OK);
    assert_int_equal(put(W.a, "a", "a1", 100), MC_OK); /* naming its own tenant is fine */
    assert_int_equal(put(W.a, "", "a2", 100), MC_OK);
    assert_int_equal(put(W.b, "", "shared", 3000), MC_OK);
    assert_int_equal(put(W.b, "", "b1", 100), MC_OK);
    assert_int_equal(put(W.b, "", "x-b", 100), MC_OK);
    return 0;
}

static int teardown_world(void **state)
{
    mc_rpc_client_destroy(W.a);
    mc_rpc_client_destroy(W.b);
    mc_rpc_client_destroy(W.admin);
    teardown(state);
    mc_auth_free(W.srv);
    mc_auth_free(W.ka);
    mc_auth_free(W.kb);
    mc_auth_free(W.kc);
    return 0;
}

/* The same key in three tenants is three objects; reads of another tenant's keys find
 * nothing. */
static void test_same_key_three_objects(void **state)
{
    (void)state;
    assert_int_equal(size_of(W.admin, "", "shared"), 1000);
    assert_int_equal(size_of(W.a, "", "shared"), 2000);
    assert_int_equal(size_of(W.b, "", "shared"), 3000);
    assert_int_equal(size_of(W.admin, "a", "shared"), 2000); /* cluster token acting for a */
    assert_int_equal(size_of(W.admin, "b", "shared"), 3000);
    assert_int_equal(key_op(W.a, MC_OP_GET_REPLICA_LIST, "", "b1"), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(key_op(W.a, MC_OP_EXIST_KEY, "", "b1"), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(key_op(W.a, MC_OP_EXIST_KEY, "", "d1"), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(key_op(W.admin, MC_OP_EXIST_KEY, "", "a1"), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(key_op(W.a, MC_OP_EXIST_KEY, "", "a1"), MC_OK);
    assert_int_equal(key_op(W.admin, MC_OP_EXIST_KEY, "a", "a1"), MC_OK);
    assert_int_equal(size_of(W.a, "", "b1"), 0);
    const char *keys[] = {"a1", "a2", "b1", "x-b", "d1", "shared"};
    assert_int_equal(batch_exist(W.a, "", keys, 6), 3);
    assert_int_equal(batch_exist(W.b, "", keys, 6), 3);
    assert_int_equal(batch_exist(W.admin, "", keys, 6), 2);
    /* removing another tenant's key: not found, and it stays */
    assert_int_equal(key_op(W.a, MC_OP_REMOVE, "", "b1"), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(key_op(W.b, MC_OP_EXIST_KEY, "", "b1"), MC_OK);
    assert_int_equal(key_op(W.a, MC_OP_REMOVE, "", "shared"), MC_OK);
    assert_int_equal(size_of(W.b, "", "shared"), 3000);
    assert_int_equal(size_of(W.admin, "", "shared"), 1000);
}

/* A tenant token naming another tenant is refused, whatever the operation. */
static void test_other_tenant_refused(void **state)
{
    (void)state;
    uint64_t n = 0;
    char text[1024];
    assert_int_equal(put(W.a, "b", "evil", 100), MC_ERR_PERMISSION);
    assert_int_equal(put(W.a, "default", "evil", 100), MC_ERR_PERMISSION);
    assert_int_equal(key_op(W.a, MC_OP_GET_REPLICA_LIST, "b", "b1"), MC_ERR_PERMISSION);
    assert_int_equal(key_op(W.a, MC_OP_EXIST_KEY, "b", "b1"), MC_ERR_PERMISSION);
    assert_int_equal(key_op(W.a, MC_OP_REMOVE, "b", "b1"), MC_ERR_PERMISSION);
    assert_int_equal(list(W.a, "b", text, sizeof(text)), MC_ERR_PERMISSION);
    assert_int_equal(poll_committed(W.a, "b", NULL, false), MC_ERR_PERMISSION);
    assert_int_equal(remove_all(W.a, "b", &n), MC_ERR_PERMISSION);
    assert_int_equal(remove_regex(W.a, "b", ".*", &n), MC_ERR_PERMISSION);
    assert_int_equal(key_op(W.b, MC_OP_EXIST_KEY, "", "b1"), MC_OK);
    assert_int_equal(list(W.b, "", text, sizeof(text)), 3);
}

/* Listings and events of a tenant carry its own user keys only. */
static void test_list_and_events_scoped(void **state)
{
    (void)state;
    char text[1024];
    assert_int_equal(list(W.a, "", text, sizeof(text)), 3);
    assert_true(listed(text, "shared") && listed(text, "a1") && listed(text, "a2"));
    assert_int_equal(list(W.b, "", text, sizeof(text)), 3);
    assert_true(listed(text, "shared") && listed(text, "b1") && listed(text, "x-b"));
    assert_int_equal(list(W.admin, "", text, sizeof(text)), 2); /* default only */
    assert_true(listed(text, "shared") && listed(text, "d1"));
    assert_int_equal(list(W.admin, "b", text, sizeof(text)), 3);
    assert_true(listed(text, "x-b"));
    assert_int_equal(poll_committed(W.a, "", NULL, false), 3);
    assert_int_equal(poll_committed(W.a, "", "a", true), 2); /* the feed: placements too */
    assert_int_equal(poll_committed(W.b, "", NULL, true), 3);
    assert_int_equal(poll_committed(W.admin, "", NULL, false), 2);
    assert_int_equal(poll_committed(W.admin, "a", NULL, false), 3);
}

/* RemoveAll and RemoveByRegex (on the user key) touch the caller's tenant only. */
static void test_removals_scoped(void **state)
{
    (void)state;
    uint64_t n = 0;
    char text[1024];
    assert_int_equal(remove_regex(W.b, "", "^x-", &n), MC_OK); /* user key "x-b" */
    assert_int_equal(n, 1);
    assert_int_equal(remove_regex(W.a, "", ".*", &n), MC_OK);
    assert_int_equal(n, 3);
    assert_int_equal(list(W.a, "", text, sizeof(text)), 0);
    assert_int_equal(list(W.b, "", text, sizeof(text)), 2);
    assert_int_equal(list(W.admin, "", text, sizeof(text)), 2);
    assert_int_equal(remove_all(W.b, "", &n), MC_OK);
    assert_int_equal(n, 2);
    assert_int_equal(list(W.admin, "", text, sizeof(text)), 2);
    assert_int_equal(remove_all(W.admin, "", &n), MC_OK); /* default: the cluster's own keys */
    assert_int_equal(n, 2);
    assert_int_equal(put(W.b, "", "b2", 100), MC_OK);
    assert_int_equal(remove_all(W.admin, "", &n), MC_OK);
    assert_int_equal(n, 0);
    assert_int_equal(remove_all(W.admin, "b", &n), MC_OK); /* acting for b */
    assert_int_equal(n, 1);
}

/* Keys starting with byte 0x01 (the internal tenant mark) and invalid tenant names. */
static void test_reserved_key_and_bad_names(void **state)
{
    (void)state;
    char text[1024];
    assert_int_equal(put(W.admin, "", "\x01" "a" "\x01" "a1", 100), MC_ERR_INVALID_KEY);
    assert_int_equal(key_op(W.admin, MC_OP_EXIST_KEY, "", "\x01" "a" "\x01" "a1"),
                     MC_ERR_INVALID_KEY);
    assert_int_equal(put(W.a, "", "\x01x", 100), MC_ERR_INVALID_KEY);
    assert_int_equal(put(W.a, "", "x\x01", 100), MC_OK); /* only the first byte is reserved */
    assert_int_equal(put(W.admin, "_sys", "k", 100), MC_ERR_INVALID_PARAMS);
    assert_int_equal(put(W.admin, "bad\nname", "k", 100), MC_ERR_INVALID_PARAMS);
    assert_int_equal(put(W.admin, "del\x7f", "k", 100), MC_ERR_INVALID_PARAMS);
    char longname[80];
    memset(longname, 't', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = 0;
    assert_int_equal(put(W.admin, longname, "k", 100), MC_ERR_INVALID_PARAMS);
    longname[64] = 0; /* 64 bytes: the longest valid name */
    assert_int_equal(put(W.admin, longname, "k", 100), MC_OK);
    /* the longest user key in the longest tenant fits the master's key cap */
    char *big = malloc(MC_RPC_MAX_KEY + 1);
    memset(big, 'k', MC_RPC_MAX_KEY);
    big[MC_RPC_MAX_KEY] = 0;
    assert_int_equal(put(W.admin, longname, big, 100), MC_OK);
    assert_int_equal(list(W.admin, longname, text, sizeof(text)), 2);
    free(big);
    assert_int_equal(put(W.admin, "default", "d2", 100), MC_OK); /* "default" = "" */
    assert_int_equal(key_op(W.admin, MC_OP_EXIST_KEY, "", "d2"), MC_OK);
}

/* The grants one answer carries must cover exactly its replicas, for `tenant` and `access`,
 * signed with the cluster key; checked with mc_grant_verify. Returns the ranges covered. */
static uint32_t grants_check(McRpc__TeGrant *const *g, size_t n, const char *tenant,
                             uint8_t access)
{
    uint32_t ranges = 0;
    uint64_t now = mc_wall_ms();
    for (size_t i = 0; i < n; i++) {
        mc_grant_view_t v;
        const char *ep = g[i]->transport_endpoint;
        assert_int_equal(mc_grant_verify(W.kc, ep, tenant, g[i]->grant.data, g[i]->grant.len, &v),
                         MC_OK);
        assert_int_equal(v.access, access);
        assert_true(v.expiry_ms > now && v.expiry_ms < now + 120000);
        /* made for this tenant only */
        assert_int_equal(mc_grant_verify(W.kc, ep, "b", g[i]->grant.data, g[i]->grant.len, &v),
                         MC_ERR_AUTH);
        ranges += v.n;
    }
    return ranges;
}

/* Answers to a tenant-bound connection carry data grants for the replicas they hand out (read
 * for lookups, write for PutStart; one per endpoint for a whole batch); answers to a cluster
 * token carry none (docs/security.md, "Data ports and tenants"). */
/* Allocated bytes of the world's segment (QuerySegmentStatus). */
static uint64_t seg_used(void)
{
    McRpc__QuerySegmentStatusRequest q = MC_RPC__QUERY_SEGMENT_STATUS_REQUEST__INIT;
    q.segment_name = "seg0";
    ProtobufCMessage *resp = NULL;
    assert_int_equal(call(W.admin, MC_OP_QUERY_SEGMENT_STATUS, &q.base, &resp), MC_OK);
    uint64_t used = ((McRpc__QuerySegmentStatusResponse *)resp)->used;
    mc_rpc_response_free(resp);
    return used;
}

static void release(mc_rpc_client_t *c, uint64_t token)
{
    McRpc__ReleaseRetiredRequest q = MC_RPC__RELEASE_RETIRED_REQUEST__INIT;
    q.client_id = (ProtobufCBinaryData){16, CID};
    q.tokens = &token;
    q.n_tokens = 1;
    assert_int_equal(call(c, MC_OP_RELEASE_RETIRED, &q.base, NULL), MC_OK);
}

static void test_grants_in_answers(void **state)
{
    (void)state;
    McRpc__PutStartRequest ps = MC_RPC__PUT_START_REQUEST__INIT;
    ps.client_id = (ProtobufCBinaryData){16, CID};
    ps.key = mc_wire_key_str("g1");
    ps.value_size = 4096;
    ProtobufCMessage *resp = NULL;
    assert_int_equal(call(W.a, MC_OP_PUT_START, &ps.base, &resp), MC_OK);
    McRpc__PutStartResponse *pr = (void *)resp;
    assert_int_equal(pr->n_grants, 1);
    assert_int_equal(grants_check(pr->grants, pr->n_grants, "a", MC_GRANT_WRITE),
                     pr->n_replicas);
    mc_rpc_response_free(resp);
    McRpc__PutEndRequest pe = MC_RPC__PUT_END_REQUEST__INIT;
    pe.client_id = (ProtobufCBinaryData){16, CID};
    pe.key = mc_wire_key_str("g1");
    assert_int_equal(call(W.a, MC_OP_PUT_END, &pe.base, NULL), MC_OK);

    McRpc__KeyRequest q = MC_RPC__KEY_REQUEST__INIT;
    q.client_id = (ProtobufCBinaryData){16, CID};
    q.key = mc_wire_key_str("g1");
    assert_int_equal(call(W.a, MC_OP_GET_REPLICA_LIST, &q.base, &resp), MC_OK);
    McRpc__ReplicaListResponse *rl = (void *)resp;
    assert_int_equal(rl->n_grants, 1);
    mc_grant_view_t v;
    assert_int_equal(mc_grant_verify(W.kc, rl->grants[0]->transport_endpoint, "a",
                                     rl->grants[0]->grant.data, rl->grants[0]->grant.len, &v),
                     MC_OK);
    assert_int_equal(v.n, 1);
    assert_int_equal(mc_grant_range(&v, 0).addr, rl->replicas[0]->buffer_address);
    assert_int_equal(mc_grant_range(&v, 0).len, rl->replicas[0]->size);
    assert_int_equal(grants_check(rl->grants, rl->n_grants, "a", MC_GRANT_READ), 1);
    mc_rpc_response_free(resp);

    const char *keys[] = {"g1", "a1", "missing", "a2"};
    McRpc__BatchKeyRequest bq = MC_RPC__BATCH_KEY_REQUEST__INIT;
    bq.client_id = (ProtobufCBinaryData){16, CID};
    bq.n_keys = 4;
    bq.keys = mc_wire_keys(keys, 4);
    assert_int_equal(call(W.a, MC_OP_BATCH_GET_REPLICA_LIST, &bq.base, &resp), MC_OK);
    McRpc__BatchReplicaListResponse *br = (void *)resp;
    assert_int_equal(br->n_grants, 1); /* one segment: one grant for the whole batch */
    assert_int_equal(grants_check(br->grants, br->n_grants, "a", MC_GRANT_READ), 3);
    for (size_t i = 0; i < br->n_results; i++)
        assert_int_equal(br->results[i]->n_grants, 0);
    mc_rpc_response_free(resp);

    /* a forced remove of the leased g1 lists its replica for stamping, with a write grant; its
     * space stays parked after ReleaseRetired while grants may cover it (security.md, "Space
     * under grants") */
    uint64_t used0 = seg_used();
    q.force = true;
    assert_int_equal(call(W.a, MC_OP_REMOVE, &q.base, &resp), MC_OK);
    McRpc__StatusResponse *sr = (void *)resp;
    assert_int_equal(sr->status, MC_OK);
    assert_non_null(sr->retired);
    assert_int_equal(sr->retired->n_replicas, 1);
    assert_int_equal(grants_check(sr->retired->grants, sr->retired->n_grants, "a", MC_GRANT_WRITE),
                     1);
    release(W.a, sr->retired->token);
    mc_rpc_response_free(resp);
    assert_int_equal(seg_used(), used0);
    /* the same for a cluster token, on an object no tenant-bound peer was handed (the default
     * tenant's, put with the cluster token): freed */
    McRpc__KeyRequest qb = MC_RPC__KEY_REQUEST__INIT;
    qb.client_id = (ProtobufCBinaryData){16, CID};
    qb.key = mc_wire_key_str("shared");
    assert_int_equal(call(W.admin, MC_OP_GET_REPLICA_LIST, &qb.base, NULL), MC_OK);
    qb.force = true;
    assert_int_equal(call(W.admin, MC_OP_REMOVE, &qb.base, &resp), MC_OK);
    sr = (void *)resp;
    assert_non_null(sr->retired);
    assert_int_equal(sr->retired->n_grants, 0);
    release(W.admin, sr->retired->token);
    mc_rpc_response_free(resp);
    assert_true(seg_used() <= used0 - 1000);
    q.force = false;
    q.key = mc_wire_key_str("a1");

    /* a cluster token needs none */
    q.tenant_id = "a";
    assert_int_equal(call(W.admin, MC_OP_GET_REPLICA_LIST, &q.base, &resp), MC_OK);
    assert_int_equal(((McRpc__ReplicaListResponse *)resp)->n_grants, 0);
    mc_rpc_response_free(resp);
    bq.tenant_id = "a";
    assert_int_equal(call(W.admin, MC_OP_BATCH_GET_REPLICA_LIST, &bq.base, &resp), MC_OK);
    assert_int_equal(((McRpc__BatchReplicaListResponse *)resp)->n_grants, 0);
    mc_rpc_response_free(resp);
    mc_free(bq.keys);
}

/* CreateCopyTask of key in tenant t ("" = the token's) to segment seg1: the status, the id. */
static mc_status_t copy_task(mc_rpc_client_t *c, const char *t, const char *key, uint64_t id[2])
{
    McRpc__CreateCopyTaskRequest q = MC_RPC__CREATE_COPY_TASK_REQUEST__INIT;
    char *targets[] = {"seg1"};
    q.key = mc_wire_key_str(key);
    q.targets = targets;
    q.n_targets = 1;
    q.tenant_id = (char *)t;
    ProtobufCMessage *resp = NULL;
    mc_status_t st = call(c, MC_OP_CREATE_COPY_TASK, &q.base, &resp);
    if (resp) {
        id[0] = ((McRpc__TaskIdResponse *)resp)->id_high;
        id[1] = ((McRpc__TaskIdResponse *)resp)->id_low;
        mc_rpc_response_free(resp);
    }
    return st;
}

static mc_status_t query_task(mc_rpc_client_t *c, const uint64_t id[2])
{
    McRpc__QueryTaskRequest q = MC_RPC__QUERY_TASK_REQUEST__INIT;
    q.id_high = id[0];
    q.id_low = id[1];
    return call(c, MC_OP_QUERY_TASK, &q.base, NULL);
}

static void test_replica_tasks_scoped(void **state)
{
    (void)state;
    McRpc__SegmentInfo si = MC_RPC__SEGMENT_INFO__INIT; /* a second segment: the target */
    si.name = "seg1";
    si.base_addr = 1ull << 30;
    si.size = 64 << 20;
    si.host_label = "h2";
    si.te_endpoint = "127.0.0.1:1235";
    uint8_t uuid[16] = {2};
    si.segment_uuid = (ProtobufCBinaryData){16, uuid};
    McRpc__MountSegmentRequest mq = MC_RPC__MOUNT_SEGMENT_REQUEST__INIT;
    mq.client_id = (ProtobufCBinaryData){16, CID};
    mq.segment = &si;
    assert_int_equal(call(W.admin, MC_OP_MOUNT_SEGMENT, &mq.base, NULL), MC_OK);
    uint64_t id[2] = {0, 0}, other[2];
    /* a's key: a's task, which b cannot see; b has no "a1"; naming another tenant is refused */
    assert_int_equal(copy_task(W.a, "", "a1", id), MC_OK);
    assert_true(id[0] || id[1]);
    assert_int_equal(query_task(W.a, id), MC_OK);
    assert_int_equal(query_task(W.b, id), MC_ERR_TASK_NOT_FOUND);
    assert_int_equal(query_task(W.admin, id), MC_ERR_TASK_NOT_FOUND); /* "default" */
    assert_int_equal(copy_task(W.b, "", "a1", other), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(copy_task(W.a, "b", "b1", other), MC_ERR_PERMISSION);
    assert_int_equal(copy_task(W.admin, "", "a1", other), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(copy_task(W.admin, "a", "a1", other), MC_OK); /* cluster token for a */
    /* the owner's calls are a storage server's: not for tenant tokens */
    McRpc__FetchTasksRequest fq = MC_RPC__FETCH_TASKS_REQUEST__INIT;
    fq.client_id = (ProtobufCBinaryData){16, CID};
    assert_int_equal(call(W.a, MC_OP_FETCH_TASKS, &fq.base, NULL), MC_ERR_PERMISSION);
    McRpc__TaskStepRequest sq = MC_RPC__TASK_STEP_REQUEST__INIT;
    sq.client_id = (ProtobufCBinaryData){16, CID};
    sq.id_high = id[0];
    sq.id_low = id[1];
    assert_int_equal(call(W.a, MC_OP_COPY_START, &sq.base, NULL), MC_ERR_PERMISSION);
    ProtobufCMessage *resp = NULL;
    assert_int_equal(call(W.admin, MC_OP_FETCH_TASKS, &fq.base, &resp), MC_OK);
    assert_int_equal(((McRpc__FetchTasksResponse *)resp)->n_tasks, 2);
    mc_rpc_response_free(resp);
}

/* Whether one of the grants (verified for tenant a, read access) covers [addr, addr + len) of
 * endpoint ep. */
static bool grant_covers(McRpc__TeGrant *const *g, size_t n, const char *ep, uint64_t addr,
                         uint64_t len)
{
    for (size_t i = 0; i < n; i++) {
        mc_grant_view_t v;
        if (strcmp(g[i]->transport_endpoint, ep) != 0 ||
            mc_grant_verify(W.kc, ep, "a", g[i]->grant.data, g[i]->grant.len, &v) != MC_OK ||
            v.access != MC_GRANT_READ)
            continue;
        for (uint32_t k = 0; k < v.n; k++) {
            mc_grant_range_t r = mc_grant_range(&v, k);
            if (r.addr <= addr && addr + len <= r.addr + r.len)
                return true;
        }
    }
    return false;
}

/* The placements of a feed answer: how many; each replica covered by the answer's grants when
 * `granted` (none of them carries its own). */
static size_t feed_placements(const McRpc__PollEventsResponse *r, bool granted)
{
    size_t n = 0;
    for (size_t i = 0; i < r->n_events; i++) {
        const McRpc__ReplicaListResponse *pl = r->events[i]->placement;
        if (!pl)
            continue;
        n++;
        assert_int_equal(pl->n_grants, 0);
        for (size_t k = 0; granted && k < pl->n_replicas; k++)
            assert_true(grant_covers(r->grants, r->n_grants, pl->replicas[k]->transport_endpoint,
                                     pl->replicas[k]->buffer_address, pl->replicas[k]->size));
    }
    return n;
}

static McRpc__PollEventsResponse *feed_poll(mc_rpc_client_t *c, const char *t, uint64_t from,
                                            uint32_t wait_ms)
{
    McRpc__PollEventsRequest q = MC_RPC__POLL_EVENTS_REQUEST__INIT;
    q.tenant_id = (char *)t;
    q.from_seq = from;
    q.wait_ms = wait_ms;
    q.with_placements = true;
    ProtobufCMessage *resp = NULL;
    if (mc_rpc_client_call(c, MC_OP_POLL_EVENTS, &q.base, &resp, 5000) != MC_OK)
        return NULL;
    return (McRpc__PollEventsResponse *)resp;
}

typedef struct bg_feed {
    mc_rpc_client_t *c;
    uint64_t from;
    McRpc__PollEventsResponse *r;
} bg_feed_t;

static void *bg_feed(void *arg)
{
    bg_feed_t *b = arg;
    b->r = feed_poll(b->c, "", b->from, 1000);
    return NULL;
}

/* The placement feed of a tenant-bound poller: the answer carries read grants covering every
 * placement (one per endpoint; the placements carry none), answered at once or, parked, by
 * the master's cron; an object pushed that way counts as handed out under grants (its space
 * stays parked after a forced remove); a cluster token's feed carries no grants. */
static void test_feed_grants(void **state)
{
    fixture_t *f = *state;
    /* f1 of tenant a, put by the cluster token: no grant covered it before the feed's */
    assert_int_equal(put(W.admin, "a", "f1", 4096), MC_OK);
    McRpc__PollEventsResponse *r = feed_poll(W.a, "", 1, 0);
    assert_non_null(r);
    assert_int_equal(r->status, MC_OK);
    assert_int_equal(feed_placements(r, true), 4); /* shared, a1, a2, f1: a's keys only */
    assert_int_equal(r->n_grants, 1);             /* one segment */
    assert_int_equal(grants_check(r->grants, r->n_grants, "a", MC_GRANT_READ), 4);
    uint64_t next = r->next_seq;
    mc_rpc_response_free(&r->base);

    /* parked, answered by the cron with the grant of what was committed meanwhile */
    bg_feed_t b = {.c = client(f, W.ka), .from = next};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, bg_feed, &b), 0);
    struct timespec ts = {0, 100 * 1000000L};
    nanosleep(&ts, NULL); /* only makes parking likely; the checks hold either way */
    assert_int_equal(put(W.admin, "a", "p1", 8192), MC_OK);
    pthread_join(th, NULL);
    mc_rpc_client_destroy(b.c);
    assert_non_null(b.r);
    assert_int_equal(b.r->status, MC_OK);
    assert_int_equal(feed_placements(b.r, true), 1);
    assert_int_equal(grants_check(b.r->grants, b.r->n_grants, "a", MC_GRANT_READ), 1);
    mc_rpc_response_free(&b.r->base);

    /* space under grants: f1's, pushed with a grant only, stays allocated after a forced
     * remove by the cluster token and ReleaseRetired */
    uint64_t used0 = seg_used();
    McRpc__KeyRequest kq = MC_RPC__KEY_REQUEST__INIT;
    kq.client_id = (ProtobufCBinaryData){16, CID};
    kq.tenant_id = "a";
    kq.key = mc_wire_key_str("f1");
    kq.force = true;
    ProtobufCMessage *resp = NULL;
    assert_int_equal(call(W.admin, MC_OP_REMOVE, &kq.base, &resp), MC_OK);
    McRpc__StatusResponse *sr = (void *)resp;
    assert_non_null(sr->retired); /* under the feed's read lease */
    release(W.admin, sr->retired->token);
    mc_rpc_response_free(resp);
    assert_int_equal(seg_used(), used0);

    /* a cluster token acting for a: the same placements (f1 gone), no grants */
    r = feed_poll(W.admin, "a", 1, 0);
    assert_non_null(r);
    assert_int_equal(feed_placements(r, false), 4); /* shared, a1, a2, p1 */
    assert_int_equal(r->n_grants, 0);
    mc_rpc_response_free(&r->base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_same_key_three_objects, setup_world, teardown_world),
        cmocka_unit_test_setup_teardown(test_replica_tasks_scoped, setup_world, teardown_world),
        cmocka_unit_test_setup_teardown(test_grants_in_answers, setup_world, teardown_world),
        cmocka_unit_test_setup_teardown(test_feed_grants, setup_world, teardown_world),
        cmocka_unit_test_setup_teardown(test_other_tenant_refused, setup_world, teardown_world),
        cmocka_unit_test_setup_teardown(test_list_and_events_scoped, setup_world, teardown_world),
        cmocka_unit_test_setup_teardown(test_removals_scoped, setup_world, teardown_world),
        cmocka_unit_test_setup_teardown(test_reserved_key_and_bad_names, setup_world,
                                        teardown_world),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
