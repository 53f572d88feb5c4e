/* Extra segments: memory a client contributes after setup, next to its setup segment
 * (upstream's mount_segment / allocate_and_mount_segment / unmount_segment /
 * unmount_and_free_segment). docs/internals/store-client.md, "Extra segments".
 *
 * Each extra segment is one registered TE buffer mounted with the master under its own name,
 * "<te name>#<n>" (our master keys segments by name), served by this client's TE endpoint, with
 * a fresh 16-byte segment UUID that is also its id for the caller. Its memory is either a
 * MAP_SHARED mapping of a file range (mount_file) or TE shareable memory (alloc_mount).
 *
 * The heartbeat covers them like the setup segment (store.c): every answered ping extends how
 * long they are served (store_xsegs_serve_until), a re-mount re-mounts them too
 * (store_xsegs_remount, after the same wait), and destroy fences, unmounts and frees them
 * (store_xsegs_fini). A graceful unmount (grace_ms > 0) asks the master to drain the segment's
 * read leases first; the segment stays registered and served until the master no longer knows
 * it, which the heartbeat checks (store_xsegs_reap), then it is freed.
 *
 * Locking: s->xseg_mu guards the list and xseg_until; it is taken inside ping_mu (store_ping)
 * and never held across a call that takes ping_mu. Master calls made while holding it are
 * short (one RPC each). */
#include "client/store_int.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define XSEG_ALIGN (4u << 20) /* allocate_and_mount rounds up to this, as upstream (its slab) */
#define XSEG_MAX 1024         /* extra segments per client */

struct store_xseg {
    char name[MC_HOST_MAX + 16];
    uint8_t uuid[16];
    void *base;
    size_t size;
    int kind;                 /* MC_STORE_SEG_FILE or MC_STORE_SEG_ALLOC */
    bool draining;            /* graceful unmount sent: freed when the master forgets it */
};

static McRpc__SegmentInfo *xseg_info(mc_store_t *s, const store_xseg_t *x,
                                     McRpc__SegmentInfo *info)
{
    mc_rpc__segment_info__init(info);
    info->name = (char *)x->name;
    info->base_addr = (uint64_t)(uintptr_t)x->base;
    info->size = x->size;
    info->host_label = s->host_label;
    info->te_endpoint = (char *)s->te_name;
    info->segment_uuid.len = 16;
    info->segment_uuid.data = (uint8_t *)x->uuid;
    info->page_size = mc_te_shareable_page_size(s->te, x->base);
    return info;
}

/* Upstream's dummy clients cannot mount segments ("requires RealClient"). */
static bool xseg_dummy(mc_store_t *s, const char *op)
{
    if (!s->dummy)
        return false;
    MC_LOG_ERROR("%s requires the embedded client (this one is a dummy client)", op);
    return true;
}

static void xseg_release_memory(mc_store_t *s, store_xseg_t *x)
{
    mc_status_t st = mc_te_unregister(s->te, x->base);
    if (st != MC_OK && st != MC_ERR_OBJECT_NOT_FOUND) {
        /* transfers still touch it: keep the memory rather than free it under them */
        MC_LOG_ERROR("segment %s: unregister failed (%s); its memory is kept", x->name,
                     mc_status_str(st));
        return;
    }
    if (x->kind == MC_STORE_SEG_FILE)
        munmap(x->base, x->size);
    else
        mc_te_free_shareable(s->te, x->base);
}

static mc_status_t xseg_call_unmount(mc_store_t *s, const char *name, bool graceful)
{
    McRpc__UnmountSegmentRequest req = MC_RPC__UNMOUNT_SEGMENT_REQUEST__INIT;
    req.client_id = mc_master_client_id(&s->master);
    req.segment_name = (char *)name;
    ProtobufCMessage *resp = NULL;
    mc_status_t st = mc_master_client_call(&s->master, graceful ? MC_OP_GRACEFUL_UNMOUNT_SEGMENT
                                                                : MC_OP_UNMOUNT_SEGMENT,
                                           &req.base, &resp, 1);
    if (st == MC_OK)
        st = ((McRpc__StatusResponse *)resp)->status;
    mc_rpc_response_free(resp);
    return st;
}

/* Registers [base, base+size), mounts it with the master and lists it. On failure nothing is
 * left registered or mounted; the caller still owns the memory. */
static mc_status_t xseg_add(mc_store_t *s, void *base, size_t size, int kind,
                            const char *location, uint8_t id[16])
{
    store_xseg_t x = {.base = base, .size = size, .kind = kind};
    store_uuid_random(x.uuid);
    pthread_mutex_lock(&s->xseg_mu);
    bool full = s->n_xsegs >= XSEG_MAX;
    unsigned n = ++s->xseg_next;
    pthread_mutex_unlock(&s->xseg_mu);
    if (full) {
        MC_LOG_ERROR("mount segment: this client has %d extra segments already", XSEG_MAX);
        return MC_ERR_TOO_LARGE;
    }
    snprintf(x.name, sizeof(x.name), "%s#%u", s->te_name, n);
    mc_status_t st = mc_te_register(s->te, base, size, location && *location ? location : "cpu:0");
    if (st != MC_OK) {
        MC_LOG_ERROR("mount segment %s: register of %zu bytes failed: %s", x.name, size,
                     mc_status_str(st));
        return MC_ERR_INVALID_PARAMS;
    }
    McRpc__SegmentInfo info;
    McRpc__MountSegmentRequest req = MC_RPC__MOUNT_SEGMENT_REQUEST__INIT;
    req.client_id = mc_master_client_id(&s->master);
    req.segment = xseg_info(s, &x, &info);
    pthread_mutex_lock(&s->xseg_mu);
    /* serve it as long as the rest (the last answered ping's limit) before readers can know it */
    if (s->xseg_until)
        mc_te_set_serve_until(s->te, base, s->xseg_until);
    st = mc_array_reserve(&s->xsegs, &s->cap_xsegs, s->n_xsegs + 1, 4);
    if (st == MC_OK) {
        ProtobufCMessage *resp = NULL;
        st = mc_master_client_call(&s->master, MC_OP_MOUNT_SEGMENT, &req.base, &resp, 1);
        if (st == MC_OK)
            st = ((McRpc__StatusResponse *)resp)->status;
        mc_rpc_response_free(resp);
        if (st == MC_OK)
            s->xsegs[s->n_xsegs++] = x;
    }
    pthread_mutex_unlock(&s->xseg_mu);
    if (st != MC_OK) {
        MC_LOG_ERROR("mount segment %s (%zu bytes) failed: %s", x.name, size, mc_status_str(st));
        mc_te_unregister(s->te, base);
        return st;
    }
    MC_LOG_INFO("mounted extra segment %s (%zu bytes)", x.name, size);
    memcpy(id, x.uuid, 16);
    return MC_OK;
}

mc_status_t mc_store_segment_mount_file(mc_store_t *s, const char *path, uint64_t offset,
                                        size_t size, const char *location, uint8_t id[16])
{
    if (!s || !path || !id || size == 0)
        return MC_ERR_INVALID_PARAMS;
    if (xseg_dummy(s, "mount_segment"))
        return MC_ERR_NOT_SUPPORTED;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        MC_LOG_ERROR("mount segment: open %s failed: %m", path);
        return MC_ERR_FILE_OPEN_FAIL;
    }
    struct stat sb;
    mc_status_t st = MC_OK;
    long page = sysconf(_SC_PAGESIZE);
    if (fstat(fd, &sb) != 0) {
        MC_LOG_ERROR("mount segment: fstat %s failed: %m", path);
        st = MC_ERR_IO;
    } else if (offset > (uint64_t)sb.st_size || size > (uint64_t)sb.st_size - offset) {
        MC_LOG_ERROR("mount segment: [offset=%llu, size=%zu] exceeds the size of %s (%lld)",
                     (unsigned long long)offset, size, path, (long long)sb.st_size);
        st = MC_ERR_INVALID_PARAMS;
    } else if (page <= 0 || offset % (uint64_t)page != 0) {
        MC_LOG_ERROR("mount segment: offset %llu is not page-aligned (page size %ld)",
                     (unsigned long long)offset, page);
        st = MC_ERR_INVALID_PARAMS;
    }
    void *p = MAP_FAILED;
    if (st == MC_OK) {
        p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)offset);
        if (p == MAP_FAILED) {
            MC_LOG_ERROR("mount segment: mmap of %s failed: %m", path);
            st = MC_ERR_IO;
        }
    }
    close(fd);
    if (st != MC_OK)
        return st;
    st = xseg_add(s, p, size, MC_STORE_SEG_FILE, location, id);
    if (st != MC_OK)
        munmap(p, size);
    return st;
}

mc_status_t mc_store_segment_alloc_mount(mc_store_t *s, size_t size, const char *location,
                                         uint8_t id[16], size_t *allocated_p)
{
    if (allocated_p)
        *allocated_p = 0;
    if (!s || !id || size == 0 || size > SIZE_MAX - XSEG_ALIGN)
        return MC_ERR_INVALID_PARAMS;
    if (xseg_dummy(s, "allocate_and_mount_segment"))
        return MC_ERR_NOT_SUPPORTED;
    size_t len = (size + XSEG_ALIGN - 1) / XSEG_ALIGN * XSEG_ALIGN;
    void *p = mc_te_alloc_shareable(s->te, len);
    if (!p) {
        MC_LOG_ERROR("allocate and mount segment: cannot allocate %zu bytes", len);
        return MC_ERR_NO_MEMORY;
    }
    mc_status_t st = xseg_add(s, p, len, MC_STORE_SEG_ALLOC, location, id);
    if (st != MC_OK) {
        mc_te_free_shareable(s->te, p);
        return st;
    }
    if (allocated_p)
        *allocated_p = len;
    return MC_OK;
}

mc_status_t mc_store_segment_unmount(mc_store_t *s, const uint8_t id[16], int kind,
                                     uint64_t grace_ms)
{
    if (!s || !id)
        return MC_ERR_INVALID_PARAMS;
    if (xseg_dummy(s, "unmount_segment"))
        return MC_ERR_NOT_SUPPORTED;
    pthread_mutex_lock(&s->xseg_mu);
    size_t i = 0;
    while (i < s->n_xsegs && !(memcmp(s->xsegs[i].uuid, id, 16) == 0 &&
                               s->xsegs[i].kind == kind && !s->xsegs[i].draining))
        i++;
    if (i == s->n_xsegs) {
        pthread_mutex_unlock(&s->xseg_mu);
        return MC_ERR_SEGMENT_NOT_FOUND;
    }
    store_xseg_t x = s->xsegs[i];
    mc_status_t st = xseg_call_unmount(s, x.name, grace_ms > 0);
    if (st == MC_OK && grace_ms > 0) {
        s->xsegs[i].draining = true; /* still served; freed by store_xsegs_reap */
    } else if (st == MC_OK) {
        mc_te_set_serve_until(s->te, x.base, 1);
        s->xsegs[i] = s->xsegs[--s->n_xsegs];
    }
    pthread_mutex_unlock(&s->xseg_mu);
    if (st != MC_OK) {
        MC_LOG_ERROR("unmount segment %s failed: %s", x.name, mc_status_str(st));
        return st;
    }
    MC_LOG_INFO("%s extra segment %s", grace_ms ? "draining" : "unmounted", x.name);
    if (!grace_ms)
        xseg_release_memory(s, &x);
    return MC_OK;
}

mc_status_t store_xsegs_copy_out(mc_store_t *s, const char *name, uint64_t addr, uint64_t size,
                                 void *buf, uint64_t *hash_p)
{
    mc_status_t st = MC_ERR_INVALID_REPLICA;
    pthread_mutex_lock(&s->xseg_mu);
    for (size_t i = 0; i < s->n_xsegs; i++) {
        const store_xseg_t *x = &s->xsegs[i];
        uint64_t base = (uint64_t)(uintptr_t)x->base;
        if (strcmp(x->name, name) != 0 || addr < base || size > x->size ||
            addr - base > x->size - size)
            continue;
        *hash_p = mc_hash64_copy(buf, (const void *)(uintptr_t)addr, size, NULL);
        st = MC_OK;
        break;
    }
    pthread_mutex_unlock(&s->xseg_mu);
    return st;
}

size_t store_xsegs_count(mc_store_t *s)
{
    pthread_mutex_lock(&s->xseg_mu);
    size_t n = s->n_xsegs;
    pthread_mutex_unlock(&s->xseg_mu);
    return n;
}

void store_xsegs_serve_until(mc_store_t *s, uint64_t until_ns)
{
    pthread_mutex_lock(&s->xseg_mu);
    s->xseg_until = until_ns;
    for (size_t i = 0; i < s->n_xsegs; i++)
        mc_te_set_serve_until(s->te, s->xsegs[i].base, until_ns);
    pthread_mutex_unlock(&s->xseg_mu);
}

mc_status_t store_xsegs_remount(mc_store_t *s)
{
    pthread_mutex_lock(&s->xseg_mu);
    /* a draining segment is not brought back: the master that asks has forgotten it */
    size_t keep = 0;
    store_xseg_t *gone = NULL;
    size_t n_gone = 0, cap_gone = 0;
    for (size_t i = 0; i < s->n_xsegs; i++) {
        if (!s->xsegs[i].draining)
            s->xsegs[keep++] = s->xsegs[i];
        else if (mc_array_reserve(&gone, &cap_gone, n_gone + 1, 4) == MC_OK)
            gone[n_gone++] = s->xsegs[i];
        /* else: its memory stays mapped (leaked) rather than freed while registered */
    }
    s->n_xsegs = keep;
    mc_status_t st = MC_OK;
    if (keep) {
        McRpc__SegmentInfo *infos = mc_calloc(keep, sizeof(*infos));
        McRpc__SegmentInfo **ptrs = mc_calloc(keep, sizeof(*ptrs));
        if (!infos || !ptrs) {
            st = MC_ERR_NO_MEMORY;
        } else {
            for (size_t i = 0; i < keep; i++)
                ptrs[i] = xseg_info(s, &s->xsegs[i], &infos[i]);
            McRpc__ReMountSegmentRequest req = MC_RPC__RE_MOUNT_SEGMENT_REQUEST__INIT;
            req.client_id = mc_master_client_id(&s->master);
            req.n_segments = keep;
            req.segments = ptrs;
            ProtobufCMessage *resp = NULL;
            st = mc_master_client_call(&s->master, MC_OP_REMOUNT_SEGMENT, &req.base, &resp, 1);
            if (st == MC_OK)
                st = ((McRpc__BatchStatusResponse *)resp)->status;
            mc_rpc_response_free(resp);
        }
        mc_free(infos);
        mc_free(ptrs);
    }
    pthread_mutex_unlock(&s->xseg_mu);
    for (size_t i = 0; i < n_gone; i++)
        xseg_release_memory(s, &gone[i]);
    mc_free(gone);
    if (st != MC_OK)
        MC_LOG_ERROR("re-mount of %zu extra segments failed: %s", keep, mc_status_str(st));
    else if (keep)
        MC_LOG_INFO("re-mounted %zu extra segments", keep);
    return st;
}

void store_xsegs_reap(mc_store_t *s)
{
    pthread_mutex_lock(&s->xseg_mu);
    for (size_t i = 0; i < s->n_xsegs;) {
        store_xseg_t x = s->xsegs[i];
        if (!x.draining) {
            i++;
            continue;
        }
        McRpc__QuerySegmentStatusRequest req = MC_RPC__QUERY_SEGMENT_STATUS_REQUEST__INIT;
        req.segment_name = x.name;
        ProtobufCMessage *resp = NULL;
        bool gone = false;
        if (mc_master_client_call(&s->master, MC_OP_QUERY_SEGMENT_STATUS, &req.base, &resp, 1) ==
            MC_OK) {
            const McRpc__QuerySegmentStatusResponse *q = (const void *)resp;
            gone = q->status == MC_ERR_SEGMENT_NOT_FOUND;
        }
        mc_rpc_response_free(resp);
        if (!gone) {
            i++;
            continue;
        }
        mc_te_set_serve_until(s->te, x.base, 1);
        s->xsegs[i] = s->xsegs[--s->n_xsegs];
        pthread_mutex_unlock(&s->xseg_mu);
        MC_LOG_INFO("extra segment %s drained; freed", x.name);
        xseg_release_memory(s, &x);
        pthread_mutex_lock(&s->xseg_mu);
    }
    pthread_mutex_unlock(&s->xseg_mu);
}

void store_xsegs_fini(mc_store_t *s, bool unmount)
{
    pthread_mutex_lock(&s->xseg_mu);
    for (size_t i = 0; i < s->n_xsegs; i++) {
        store_xseg_t *x = &s->xsegs[i];
        mc_te_set_serve_until(s->te, x->base, 1);
        if (unmount && !x->draining)
            xseg_call_unmount(s, x->name, false);
        xseg_release_memory(s, x);
    }
    mc_free(s->xsegs);
    s->xsegs = NULL;
    s->n_xsegs = s->cap_xsegs = 0;
    pthread_mutex_unlock(&s->xseg_mu);
}
