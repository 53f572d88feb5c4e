/* In-process master service for RPC tests: started on an ephemeral loopback port in its own
 * thread by a cmocka group setup, stopped by the teardown. Header-only; include after cmocka. */
#ifndef MC_TESTS_RPC_MASTER_FIXTURE_H
#define MC_TESTS_RPC_MASTER_FIXTURE_H

#include "master/service.h"
#include "rpc/rpc_client.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct fixture {
    mc_master_service_t *svc;
    pthread_t th;
    char addr[64];
} fixture_t;

static void *run_svc(void *arg)
{
    mc_master_service_run(((fixture_t *)arg)->svc);
    return NULL;
}

/* event_buffer_size 0 keeps the master default; auth (borrowed, may be NULL) and limits (may be
 * NULL: defaults) go to the RPC server. */
static int fixture_start_with(void **state, uint32_t event_buffer_size, const mc_auth_t *auth,
                              const mc_rpc_limits_t *limits)
{
    fixture_t *f = calloc(1, sizeof(*f));
    mc_master_service_opts_t o = {.rpc_address = "127.0.0.1", .port = 0, .metrics_port = -1,
                                  .auth = auth};
    if (limits)
        o.rpc_limits = *limits;
    mc_master_config_default(&o.cfg);
    if (event_buffer_size)
        o.cfg.event_buffer_size = event_buffer_size;
    if (!f || mc_master_service_create(&o, &f->svc) != MC_OK) {
        free(f);
        return -1;
    }
    snprintf(f->addr, sizeof(f->addr), "127.0.0.1:%u", mc_master_service_port(f->svc));
    pthread_create(&f->th, NULL, run_svc, f);
    *state = f;
    return 0;
}

static inline int fixture_start(void **state, uint32_t event_buffer_size)
{
    return fixture_start_with(state, event_buffer_size, NULL, NULL);
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    mc_master_service_stop(f->svc);
    pthread_join(f->th, NULL);
    mc_master_service_destroy(f->svc);
    free(f);
    return 0;
}

static uint8_t CID[16] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6};

/* Mounts a 64 MiB segment "seg0" for client CID. */
static void mount_seg_labelled(mc_rpc_client_t *c, const char *host_label)
{
    McRpc__SegmentInfo si = MC_RPC__SEGMENT_INFO__INIT;
    si.name = "seg0";
    si.base_addr = 1 << 20;
    si.size = 64 << 20;
    si.host_label = (char *)host_label;
    si.te_endpoint = "127.0.0.1:1234";
    uint8_t uuid[16] = {1};
    si.segment_uuid = (ProtobufCBinaryData){16, uuid};
    McRpc__MountSegmentRequest q = MC_RPC__MOUNT_SEGMENT_REQUEST__INIT;
    q.client_id = (ProtobufCBinaryData){16, CID};
    q.segment = &si;
    ProtobufCMessage *resp;
    assert_int_equal(mc_rpc_client_call(c, MC_OP_MOUNT_SEGMENT, &q.base, &resp, 2000), MC_OK);
    assert_int_equal(((McRpc__StatusResponse *)resp)->status, MC_OK);
    mc_rpc_response_free(resp);
}

/* A keyring loaded from a token file (mode 0600) holding text; the file is removed again. */
static inline mc_auth_t *fixture_ring_file(const char *text)
{
    char path[] = "/tmp/mc_rpc_ring_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    assert_int_equal(chmod(path, 0600), 0);
    mc_auth_t *a = NULL;
    assert_int_equal(mc_auth_load(path, &a), MC_OK);
    unlink(path);
    return a;
}

/* A client of the fixture's master that proves auth (borrowed; NULL = no token). */
static inline mc_rpc_client_t *fixture_client(fixture_t *f, const mc_auth_t *auth)
{
    mc_rpc_client_opts_t o = {.auth = auth};
    mc_rpc_client_t *c;
    assert_int_equal(mc_rpc_client_create(f->addr, &o, &c), MC_OK);
    return c;
}

#endif
