/* Store client lifecycle: mc_store_create / mc_store_destroy, the contributed segment (mount,
 * re-mount, serving limit), the heartbeat thread, health, hostname, buffer registration and
 * read statistics. The data paths live in store_put.c, store_get.c, store_keys.c and
 * store_feed.c; store_int.h lists the files and the handle's locking rules.
 *
 * Threads: application threads call in concurrently; the master connection pool and the TE
 * are thread-safe. One heartbeat thread pings the master every second (client_ttl / 4 when
 * that is shorter), extends how long the contributed segment may be served after each answer
 * (serve_extend), and re-mounts it when the master answers NEED_REMOUNT (remount_schedule:
 * at once after a restart that recovered it, a lease period later after a drop). Everything
 * about fencing (master_epoch, lease_ttl_ms, remount_*) is guarded by ping_mu, which
 * store_ping holds across its master call so that pings never interleave.
 *
 * Integrity: writers send the XXH3-64 of the value with PutEnd; readers verify it after every
 * transfer, and check that the read lease (granted by GetReplicaList) had not expired when the
 * transfer finished. Only then are bytes reported as read.
 *
 * Ownership: mc_store_create returns a handle that the caller releases with mc_store_destroy,
 * which stops the feed and heartbeat threads first, then unmounts the segment (when the master
 * is reachable) and frees the TE, the segment memory and the hint table.
 */
#include "client/store_int.h"

#include "common/alloc.h"
#include "common/log.h"
#include "common/net.h"
#include "common/time.h"
#include "rpc/frame.h"
#include "te/te_auth.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static McRpc__SegmentInfo *segment_info(mc_store_t *s, McRpc__SegmentInfo *info);
static mc_status_t store_mount_rpc(mc_store_t *s, int remount);
static mc_status_t store_remount(mc_store_t *s);
static mc_status_t store_mount_first(mc_store_t *s);
static uint64_t master_client_ttl_ms(mc_store_t *s);
static void serve_extend(mc_store_t *s, uint64_t t_send, uint64_t client_ttl_ms);
static int segment_recovering(mc_store_t *s);
static void remount_schedule(mc_store_t *s, const McRpc__PingResponse *pr, uint64_t now_ms);
static mc_status_t store_ping(mc_store_t *s);
static void *heartbeat_main(void *arg);
static mc_status_t store_config_check(const mc_store_config_t *cfg);
static void store_init_handle(mc_store_t *s);
static mc_status_t store_te_start(mc_store_t *s, const mc_store_config_t *cfg);
static mc_status_t store_segment_start(mc_store_t *s, const mc_store_config_t *cfg);

/* ------------------------------------------------------------------ segment and heartbeat */

static McRpc__SegmentInfo *segment_info(mc_store_t *s, McRpc__SegmentInfo *info)
{
    mc_rpc__segment_info__init(info);
    info->name = (char *)s->te_name;
    info->base_addr = (uint64_t)(uintptr_t)s->segment;
    info->size = s->segment_size;
    info->host_label = s->host_label;
    info->te_endpoint = (char *)s->te_name;
    info->segment_uuid.len = 16;
    info->segment_uuid.data = s->segment_uuid;
    info->page_size = mc_te_shareable_page_size(s->te, s->segment);
    return info;
}

/* One MountSegment (remount = 0) or ReMountSegment (1) call; no logging. */
static mc_status_t store_mount_rpc(mc_store_t *s, int remount)
{
    McRpc__SegmentInfo info;
    segment_info(s, &info);
    ProtobufCMessage *resp = NULL;
    mc_status_t st;
    if (remount) {
        McRpc__SegmentInfo *segs[1] = {&info};
        McRpc__ReMountSegmentRequest req = MC_RPC__RE_MOUNT_SEGMENT_REQUEST__INIT;
        req.client_id = mc_master_client_id(&s->master);
        req.n_segments = 1;
        req.segments = segs;
        st = mc_master_client_call(&s->master, MC_OP_REMOUNT_SEGMENT, &req.base, &resp, 1);
        if (st == MC_OK)
            st = ((McRpc__BatchStatusResponse *)resp)->status;
    } else {
        McRpc__MountSegmentRequest req = MC_RPC__MOUNT_SEGMENT_REQUEST__INIT;
        req.client_id = mc_master_client_id(&s->master);
        req.segment = &info;
        st = mc_master_client_call(&s->master, MC_OP_MOUNT_SEGMENT, &req.base, &resp, 1);
        if (st == MC_OK)
            st = ((McRpc__StatusResponse *)resp)->status;
    }
    mc_rpc_response_free(resp);
    return st;
}

/* The setup segment mounted again (after a master restart or drop), logged. */
static mc_status_t store_remount(mc_store_t *s)
{
    mc_status_t st = store_mount_rpc(s, 1);
    if (st != MC_OK)
        MC_LOG_ERROR("re-mount of segment %s (%zu bytes) failed: %s", s->te_name,
                     s->segment_size, mc_status_str(st));
    else
        MC_LOG_INFO("re-mounted segment %s (%zu bytes)", s->te_name, s->segment_size);
    return st;
}

/* The master's client_ttl in ms from one ping, 0 if it cannot be had. Touches no state of s
 * (the heartbeat has not started yet when this is used). */
static uint64_t master_client_ttl_ms(mc_store_t *s)
{
    McRpc__PingRequest req = MC_RPC__PING_REQUEST__INIT;
    req.client_id = mc_master_client_id(&s->master);
    ProtobufCMessage *resp = NULL;
    uint64_t ttl = 0;
    if (mc_master_client_call(&s->master, MC_OP_PING, &req.base, &resp, 1) == MC_OK &&
        ((McRpc__PingResponse *)resp)->status == MC_OK)
        ttl = ((McRpc__PingResponse *)resp)->client_ttl_ms;
    mc_rpc_response_free(resp);
    return ttl;
}

/* The first mount. A segment name is its server's host:port, so when the master says the name
 * is taken by another client, that client no longer listens there: it crashed, and the master
 * has not dropped it yet (it does so client_ttl after the last ping). A storage server
 * restarted at once at the same address (systemd, or a free port picked again by chance) waits
 * for that instead of failing; anything else fails at once. */
static mc_status_t store_mount_first(mc_store_t *s)
{
    mc_status_t st = store_mount_rpc(s, 0);
    uint64_t ttl = st == MC_ERR_SEGMENT_ALREADY_EXISTS ? master_client_ttl_ms(s) : 0;
    if (ttl) {
        MC_LOG_WARN("segment name %s is still held by an earlier owner (a crashed process at "
                    "this address?); retrying until the master drops it (client_ttl %llu ms)",
                    s->te_name, (unsigned long long)ttl);
        uint64_t deadline = mc_now_ms() + ttl + 1000;
        while (st == MC_ERR_SEGMENT_ALREADY_EXISTS && mc_now_ms() < deadline) {
            mc_sleep_ms(200);
            st = store_mount_rpc(s, 0);
        }
    }
    if (st != MC_OK)
        MC_LOG_ERROR("mount of segment %s (%zu bytes) failed: %s", s->te_name, s->segment_size,
                     mc_status_str(st));
    else
        MC_LOG_INFO("mounted segment %s (%zu bytes)", s->te_name, s->segment_size);
    return st;
}

/* The master answered a ping sent at t_send (ns): serve the segment until a bit less than
 * client_ttl from then, since the master cannot have dropped it before client_ttl from when it
 * received the ping, and ping at least four times per client_ttl. Same-host readers check the
 * limit themselves (te.h). */
static void serve_extend(mc_store_t *s, uint64_t t_send, uint64_t client_ttl_ms)
{
    if (client_ttl_ms == 0)
        return;
    uint64_t ttl_ns = client_ttl_ms * 1000000ull / SERVE_TTL_DEN * SERVE_TTL_NUM;
    if (s->segment)
        mc_te_set_serve_until(s->te, s->segment, t_send + ttl_ns);
    store_xsegs_serve_until(s, t_send + ttl_ns); /* extra segments (store_segments.c) */
    uint64_t hb = client_ttl_ms / 4;
    atomic_store(&s->heartbeat_ms, (unsigned)(hb && hb < STORE_HEARTBEAT_MS ? hb
                                                                         : STORE_HEARTBEAT_MS));
}

/* Whether a (restarted) master recovered this client's segment from its log and waits for
 * its owner to re-mount it: 1 yes, 0 no, -1 unknown (the question failed). */
static int segment_recovering(mc_store_t *s)
{
    McRpc__QuerySegmentStatusRequest req = MC_RPC__QUERY_SEGMENT_STATUS_REQUEST__INIT;
    req.segment_name = (char *)s->te_name;
    ProtobufCMessage *resp = NULL;
    int r = -1;
    if (mc_master_client_call(&s->master, MC_OP_QUERY_SEGMENT_STATUS, &req.base, &resp, 1) ==
        MC_OK) {
        const McRpc__QuerySegmentStatusResponse *q = (const void *)resp;
        r = q->status == MC_OK && q->segment_status == MC_RPC__SEGMENT_STATUS__SEGMENT_RECOVERING;
    }
    mc_rpc_response_free(resp);
    return r;
}

/* The master asked for a re-mount, or a decision on one is pending: sets when the
 * re-mount is due (s->remount_after_ms). A master that restarted (new epoch) and recovered
 * the segment's objects from its log waits for the re-mount: at once. A master that is still
 * the same one asks because it gave this client up after client_ttl of silence (the process
 * was stopped, or cut off): it holds the segment's objects unreadable for a while
 * (--segment_hold_sec) or dropped them, and their keys may have been put again elsewhere
 * since; so does a restarted master that did not recover the segment (no log). Then the
 * segment, fenced since it lost the master, stays unserved and unmounted for one more lease
 * period, until no reader holds a lease on what it held (store-client.md, "Lease cache"); the
 * re-mount (same segment uuid) then gets the held objects back, or mounts it empty. Under
 * ping_mu. */
static void remount_schedule(mc_store_t *s, const McRpc__PingResponse *pr, uint64_t now_ms)
{
    bool same_master = s->master_epoch && pr->master_epoch == s->master_epoch;
    if (!s->remount_undecided && same_master) {
        s->remount_after_ms = now_ms + pr->lease_ttl_ms;
        MC_LOG_WARN("the master dropped this client (silent for its client_ttl of %llu ms; "
                    "its objects are held or gone); segment %s stays unserved and re-mounts in "
                    "%llu ms, when no read lease on its old contents is left",
                    (unsigned long long)pr->client_ttl_ms, s->te_name,
                    (unsigned long long)pr->lease_ttl_ms);
        return;
    }
    int recovered = segment_recovering(s);
    /* unknown: ask again at the next ping (a recovered segment must not wait: the master drops
     * one not re-mounted within client_ttl) */
    s->remount_undecided = recovered < 0;
    if (recovered > 0) {
        s->remount_after_ms = now_ms; /* at once */
        MC_LOG_WARN("master asked to re-mount (new master epoch %llu)",
                    (unsigned long long)pr->master_epoch);
    } else if (recovered == 0) {
        uint64_t lease = pr->lease_ttl_ms > s->lease_ttl_ms ? pr->lease_ttl_ms : s->lease_ttl_ms;
        s->remount_after_ms = now_ms + lease;
        MC_LOG_WARN("the new master (epoch %llu) did not recover segment %s (no write-ahead "
                    "log?); it stays unserved and re-mounts in %llu ms, when no read lease on "
                    "its old contents is left",
                    (unsigned long long)pr->master_epoch, s->te_name, (unsigned long long)lease);
    }
}

/* Pings the master. An answered ping extends how long the segment is served (serve_extend);
 * a re-mount the master asks for is scheduled (remount_schedule) and stays due until it
 * succeeds (the master answers NEED_REMOUNT only once). */
static mc_status_t store_ping(mc_store_t *s)
{
    McRpc__PingRequest req = MC_RPC__PING_REQUEST__INIT;
    req.client_id = mc_master_client_id(&s->master);
    ProtobufCMessage *resp = NULL;
    pthread_mutex_lock(&s->ping_mu);
    uint64_t t_send = mc_now_ns();
    mc_status_t st = mc_master_client_call(&s->master, MC_OP_PING, &req.base, &resp, 1);
    if (st == MC_OK)
        st = ((McRpc__PingResponse *)resp)->status;
    if (st == MC_OK) {
        const McRpc__PingResponse *pr = (const McRpc__PingResponse *)resp;
        bool need = pr->client_status == MC_RPC__CLIENT_STATUS__CLIENT_NEED_REMOUNT;
        uint64_t now_ms = mc_now_ms();
        bool contributes = s->segment || store_xsegs_count(s) > 0;
        if (contributes && !s->remount_after_ms && (need || s->remount_undecided))
            remount_schedule(s, pr, now_ms);
        if (contributes && !s->remount_undecided) {
            if (!s->remount_after_ms) {
                serve_extend(s, t_send, pr->client_ttl_ms);
            } else if (now_ms >= s->remount_after_ms &&
                       (!s->segment || store_remount(s) == MC_OK) &&
                       store_xsegs_remount(s) == MC_OK) {
                s->remount_after_ms = 0;
                serve_extend(s, t_send, pr->client_ttl_ms);
            }
        }
        s->master_epoch = pr->master_epoch;
        atomic_store(&s->tasks_due, pr->tasks_pending);
        if (!s->remount_undecided) /* else the old master's lease still counts */
            s->lease_ttl_ms = pr->lease_ttl_ms;
    }
    pthread_mutex_unlock(&s->ping_mu);
    mc_rpc_response_free(resp);
    atomic_store(&s->master_reachable, st == MC_OK);
    return st;
}

static void *heartbeat_main(void *arg)
{
    mc_store_t *s = arg;
    pthread_mutex_lock(&s->hb_lock);
    while (!s->hb_stop) {
        pthread_mutex_unlock(&s->hb_lock);
        mc_status_t st = store_ping(s);
        if (st != MC_OK)
            MC_LOG_WARN("ping to master failed: %s", mc_status_str(st));
        else
            store_xsegs_reap(s); /* gracefully unmounted extra segments the master dropped */
        if (st == MC_OK && atomic_exchange(&s->tasks_due, false))
            store_tasks_run(s); /* replica tasks: this client owns their source segments */
        pthread_mutex_lock(&s->hb_lock);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + atomic_load(&s->heartbeat_ms) * 1000000ull;
        ts.tv_sec += (time_t)(ns / 1000000000ull);
        ts.tv_nsec = (long)(ns % 1000000000ull);
        while (!s->hb_stop && pthread_cond_timedwait(&s->hb_cond, &s->hb_lock, &ts) == 0) {
        }
    }
    pthread_mutex_unlock(&s->hb_lock);
    return NULL;
}

/* ------------------------------------------------------------------ lifecycle */

/* The configuration fields the library checks itself (the rest are checked by whoever uses
 * them: the TE, the master client). Logs the field at fault. */
static mc_status_t store_config_check(const mc_store_config_t *cfg)
{
    if (!cfg || !cfg->master_server_addr || !*cfg->master_server_addr) {
        MC_LOG_ERROR("store setup: master_server_addr is required");
        return MC_ERR_INVALID_PARAMS;
    }
    uint32_t slots = cfg->replica_hint_slots;
    if (slots > MC_STORE_REPLICA_HINTS_MAX && slots != MC_STORE_REPLICA_HINTS_OFF) {
        MC_LOG_ERROR("store setup: replica_hint_slots %u is over the maximum, %u "
                     "(MC_STORE_REPLICA_HINTS_OFF turns the hints off)", slots,
                     MC_STORE_REPLICA_HINTS_MAX);
        return MC_ERR_INVALID_PARAMS;
    }
    if (cfg->placement_feed_prefix &&
        strnlen(cfg->placement_feed_prefix, MC_STORE_KEY_MAX + 1) > MC_STORE_KEY_MAX) {
        MC_LOG_ERROR("store setup: placement_feed_prefix is longer than a key (%d bytes)",
                     MC_STORE_KEY_MAX);
        return MC_ERR_INVALID_PARAMS;
    }
    const char *bad_tenant = mc_tenant_invalid(cfg->tenant_id);
    if (bad_tenant) {
        MC_LOG_ERROR("store setup: tenant_id '%.80s' is invalid: %s (1..64 bytes, not starting "
                     "with '_', no control characters)", cfg->tenant_id, bad_tenant);
        return MC_ERR_INVALID_PARAMS;
    }
    struct in_addr a;
    if (cfg->client_http_enable && (cfg->client_http_port < 0 || cfg->client_http_port > 65535)) {
        MC_LOG_ERROR("store setup: client_http_port %d is not a port (0..65535; 0 = a free one)",
                     (int)cfg->client_http_port);
        return MC_ERR_INVALID_PARAMS;
    }
    if (cfg->client_http_enable && cfg->client_http_host && cfg->client_http_host[0] &&
        inet_pton(AF_INET, cfg->client_http_host, &a) != 1) {
        MC_LOG_ERROR("store setup: client_http_host '%s' is not an IPv4 address",
                     cfg->client_http_host);
        return MC_ERR_INVALID_PARAMS;
    }
    return MC_OK;
}

/* The tenant_id the client sends (into out, MC_TENANT_MAX + 1 bytes): a tenant-bound token's
 * tenant when the configuration names none or "default" (PERMISSION_DENIED when it names
 * another one: the master would refuse every request); else the configured one, "" for
 * "default" (the master's default, and what clients without tenants send). cfg_tenant was
 * checked by store_config_check. */
static mc_status_t store_tenant(const char *cfg_tenant, const mc_auth_t *auth, char *out)
{
    const char *bound = auth ? mc_auth_client_tenant(auth) : "";
    const char *t = mc_tenant_or_default(cfg_tenant);
    if (bound[0] && !mc_tenant_is_default(t) && strcmp(t, bound) != 0) {
        MC_LOG_ERROR("store setup: tenant_id '%s' but the token file's token is bound to tenant "
                     "'%s'", t, bound);
        return MC_ERR_PERMISSION;
    }
    if (bound[0])
        t = bound;
    snprintf(out, MC_TENANT_MAX + 1, "%s", mc_tenant_is_default(t) ? "" : t);
    return MC_OK;
}

/* Locks, the heartbeat's condition variable, the ids. */
static void store_init_handle(mc_store_t *s)
{
    pthread_mutex_init(&s->hb_lock, NULL);
    pthread_mutex_init(&s->ping_mu, NULL);
    pthread_mutex_init(&s->xseg_mu, NULL);
    pthread_mutex_init(&s->dconn_mu, NULL);
    atomic_store(&s->heartbeat_ms, STORE_HEARTBEAT_MS);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->hb_cond, &ca);
    pthread_condattr_destroy(&ca);
    store_uuid_random(s->client_id);
    store_uuid_random(s->segment_uuid);
}

/* The hint table, the lease cache, the transfer engine and the host label. */
static mc_status_t store_te_start(mc_store_t *s, const mc_store_config_t *cfg)
{
    uint32_t slots = cfg->replica_hint_slots;
    if (slots != MC_STORE_REPLICA_HINTS_OFF) {
        s->hints = mc_hint_table_new(slots ? slots : MC_STORE_REPLICA_HINTS_DEFAULT);
        s->disk_hints = mc_hint_table_new(STORE_DISK_HINTS);
    }

    /* Upstream's "tcp" means "no RDMA": same-host peers still take the shm path (the TE
     * decides per peer; MC_FORCE_TCP=1 forces tcp everywhere). */
    const char *proto = cfg->protocol;
    if (!proto || !*proto || strcmp(proto, "tcp") == 0 || strcmp(proto, "rdma") == 0)
        proto = "auto";
    /* Cached leases need the storage server's serving limit (mc_te_set_serve_until), which
     * one-sided ucx RMA reads do not pass through: a ucx client asks the master every time. */
    s->lease_cache = s->hints && !cfg->lease_cache_off && strcmp(proto, "ucx") != 0;
    s->not_ready_wait_ms = cfg->not_ready_wait_ms == MC_STORE_NOT_READY_WAIT_OFF ? 0
                           : cfg->not_ready_wait_ms ? cfg->not_ready_wait_ms
                                                    : MC_STORE_NOT_READY_WAIT_DEFAULT_MS;
    mc_te_config_t tcfg = {0};
    if (cfg->te_tuning)
        tcfg = *cfg->te_tuning;
    tcfg.metadata_uri = cfg->metadata_server && *cfg->metadata_server ? cfg->metadata_server
                                                                       : "P2PHANDSHAKE";
    tcfg.local_server_name = cfg->local_hostname && *cfg->local_hostname ? cfg->local_hostname
                                                                         : "127.0.0.1";
    tcfg.protocol = proto;
    if (cfg->transfer_timeout_ms)
        tcfg.transfer_timeout_ms = cfg->transfer_timeout_ms;
    mc_status_t st = mc_te_create(&tcfg, &s->te);
    if (st != MC_OK) {
        MC_LOG_ERROR("store setup: transfer engine failed: %s", mc_status_str(st));
        return st;
    }
    s->te_name = mc_te_local_name(s->te);
    if (cfg->host_label && *cfg->host_label) {
        snprintf(s->host_label, sizeof(s->host_label), "%s", cfg->host_label);
    } else {
        uint16_t port;
        if (mc_net_split_hostport(s->te_name, s->host_label, &port) != MC_OK)
            snprintf(s->host_label, sizeof(s->host_label), "%s", s->te_name);
    }
    return MC_OK;
}

/* Contributes and mounts the segment (global_segment_size > 0), else checks that the master
 * answers a ping. */
static mc_status_t store_segment_start(mc_store_t *s, const mc_store_config_t *cfg)
{
    mc_status_t st;
    if (cfg->global_segment_size == 0) {
        if ((st = store_ping(s)) != MC_OK)
            MC_LOG_ERROR("store setup: master %s unreachable: %s", cfg->master_server_addr,
                         mc_status_str(st));
        return st;
    }
    s->segment_size = cfg->global_segment_size;
    s->segment = mc_te_alloc_shareable(s->te, s->segment_size);
    if (!s->segment) {
        MC_LOG_ERROR("store setup: cannot allocate a %zu-byte segment", s->segment_size);
        return MC_ERR_NO_MEMORY;
    }
    st = mc_te_register(s->te, s->segment, s->segment_size, "cpu:0");
    if (st != MC_OK)
        return st;
    st = store_mount_first(s);
    if (st == MC_ERR_RPC_FAIL || st == MC_ERR_TIMEOUT)
        MC_LOG_ERROR("store setup: master %s unreachable (is mooncake_master running "
                     "there?)", cfg->master_server_addr);
    return st;
}

mc_status_t mc_store_create(const mc_store_config_t *cfg, mc_store_t **store_p)
{
    *store_p = NULL;
    mc_status_t st = store_config_check(cfg);
    if (st != MC_OK)
        return st;
    mc_store_t *s = MC_NEW(mc_store_t);
    if (!s)
        return MC_ERR_NO_MEMORY;
    store_init_handle(s);
    if (!cfg->metrics_off && !(s->metrics = store_metrics_new())) {
        st = MC_ERR_NO_MEMORY;
        goto fail;
    }
    /* the engine loads the token file (a bad one fails here, logged with its name); its
     * keyring is the one every master connection proves */
    if ((st = store_te_start(s, cfg)) != MC_OK)
        goto fail;
    s->auth = mc_te_keyring(s->te);
    char tenant[MC_TENANT_MAX + 1];
    if ((st = store_tenant(cfg->tenant_id, s->auth, tenant)) != MC_OK)
        goto fail;
    st = mc_master_client_init(&s->master, cfg->master_server_addr, cfg->rpc_timeout_ms,
                               s->client_id, s->auth);
    if (st != MC_OK)
        goto fail;
    memcpy(s->master.tenant, tenant, sizeof(tenant));
    s->master.metrics = s->metrics;
    if ((st = store_segment_start(s, cfg)) != MC_OK)
        goto fail;
    atomic_store(&s->master_reachable, 1);
    if (pthread_create(&s->heartbeat, NULL, heartbeat_main, s) != 0) {
        st = MC_ERR_INTERNAL;
        goto fail;
    }
    s->heartbeat_started = 1;
    if (cfg->ssd_offload_path && (st = store_disk_start(s, cfg->ssd_offload_path)) != MC_OK)
        goto fail;
    if ((st = store_feed_start(s, cfg->placement_feed_prefix, cfg->master_server_addr)) != MC_OK)
        goto fail;
    /* A port that cannot be had leaves the client without its HTTP server, as upstream's
     * (client_http_start logged why); only a bad host or port (checked above) fails setup. */
    if (cfg->client_http_enable)
        client_http_start(s, cfg->client_http_host, cfg->client_http_port, s->auth,
                          cfg->client_http_metrics_public, &s->http);
    *store_p = s;
    return MC_OK;
fail:
    mc_store_destroy(s);
    return st;
}

void mc_store_destroy(mc_store_t *s)
{
    if (!s)
        return;
    if (s->dummy) {
        mc_dummy_destroy(s->dummy);
        mc_free(s);
        return;
    }
    store_feed_stop(s);
    client_http_stop(s->http); /* it borrows the handle */
    if (s->heartbeat_started) {
        pthread_mutex_lock(&s->hb_lock);
        s->hb_stop = 1;
        pthread_cond_signal(&s->hb_cond);
        pthread_mutex_unlock(&s->hb_lock);
        pthread_join(s->heartbeat, NULL);
    }
    store_disk_stop(s); /* its thread reads our segment: before the segment goes */
    store_disk_readers_free(s);
    if (s->te) /* extra segments: fenced, unmounted and freed like the setup segment below */
        store_xsegs_fini(s, s->master.conns[0] && atomic_load(&s->master_reachable));
    if (s->segment && s->te) /* nothing served after the unmount (readers under cached leases) */
        mc_te_set_serve_until(s->te, s->segment, 1);
    if (s->segment && s->master.conns[0] && atomic_load(&s->master_reachable)) {
        McRpc__UnmountSegmentRequest req = MC_RPC__UNMOUNT_SEGMENT_REQUEST__INIT;
        req.client_id = mc_master_client_id(&s->master);
        req.segment_name = (char *)s->te_name;
        ProtobufCMessage *resp = NULL;
        if (mc_master_client_call(&s->master, MC_OP_UNMOUNT_SEGMENT, &req.base, &resp, 1) == MC_OK)
            MC_LOG_INFO("unmounted segment %s", s->te_name);
        mc_rpc_response_free(resp);
    }
    mc_master_client_fini(&s->master);
    if (s->te) {
        if (s->segment) {
            mc_te_unregister(s->te, s->segment);
            mc_te_free_shareable(s->te, s->segment);
        }
        mc_te_destroy(s->te);
    }
    mc_hint_table_free(s->hints);
    mc_hint_table_free(s->disk_hints);
    store_scratch_pool_fini(&s->scratch);
    mc_free(s->metrics);
    pthread_cond_destroy(&s->hb_cond);
    pthread_mutex_destroy(&s->hb_lock);
    pthread_mutex_destroy(&s->ping_mu);
    pthread_mutex_destroy(&s->xseg_mu);
    pthread_mutex_destroy(&s->dconn_mu);
    mc_free(s);
}

void mc_store_read_stats(mc_store_t *s, mc_store_read_stats_t *out)
{
    *out = (mc_store_read_stats_t){0};
    if (!s)
        return;
    if (s->dummy)
        return; /* a dummy makes no lookups of its own */
    out->master_lookups = atomic_load(&s->n_lookups);
    out->lease_hits = atomic_load(&s->n_lease_hits);
    out->lease_misses = atomic_load(&s->n_lease_misses);
    out->speculative_hits = atomic_load(&s->n_spec_hits);
    out->feed_placements = atomic_load(&s->n_feed_placements);
    uint64_t objs, bytes, offloaded;
    store_disk_stats(s, &objs, &bytes, &offloaded, &out->offload_reads_served);
}

mc_store_health_t mc_store_health(mc_store_t *s)
{
    if (!s)
        return MC_STORE_NOT_SET_UP;
    if (s->dummy)
        return mc_dummy_health(s->dummy);
    return store_ping(s) == MC_OK ? MC_STORE_HEALTHY : MC_STORE_MASTER_UNREACHABLE;
}

const char *mc_store_hostname(const mc_store_t *s)
{
    if (s && s->dummy)
        return ""; /* as upstream: a dummy has no hostname */
    return s ? s->te_name : "";
}

mc_status_t mc_store_register_buffer(mc_store_t *s, void *addr, size_t len)
{
    if (!s || !addr || !len)
        return MC_ERR_INVALID_PARAMS;
    if (s->dummy)
        return mc_dummy_register_buffer(s->dummy, addr, len);
    return mc_te_register(s->te, addr, len, "cpu:0");
}

mc_status_t mc_store_unregister_buffer(mc_store_t *s, void *addr)
{
    if (!s || !addr)
        return MC_ERR_INVALID_PARAMS;
    if (s->dummy)
        return mc_dummy_unregister_buffer(s->dummy, addr);
    return mc_te_unregister(s->te, addr);
}
