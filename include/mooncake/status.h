/* Mooncake-C status codes.
 *
 * One status type for the whole project. 0 is success, errors are negative. Where a meaning
 * matches an upstream Mooncake ErrorCode the number is the same (they reach Python users as
 * plain ints). Numbers are append-only once released: never renumber, never reuse.
 */
#ifndef MOONCAKE_STATUS_H
#define MOONCAKE_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define MC_API __attribute__((visibility("default")))
#else
#define MC_API
#endif

typedef enum mc_status {
    MC_OK = 0,
    MC_ERR_INTERNAL = -1,
    MC_ERR_BUFFER_OVERFLOW = -10,
    MC_ERR_SHARD_INDEX_OUT_OF_RANGE = -100,
    MC_ERR_SEGMENT_NOT_FOUND = -101,
    MC_ERR_SEGMENT_ALREADY_EXISTS = -102,
    MC_ERR_CLIENT_NOT_FOUND = -103,
    MC_ERR_NO_AVAILABLE_HANDLE = -200,
    MC_ERR_INVALID_VERSION = -300,
    MC_ERR_INVALID_KEY = -400,
    MC_ERR_WRITE_FAIL = -500,
    MC_ERR_INVALID_PARAMS = -600,
    MC_ERR_ILLEGAL_CLIENT = -601,
    MC_ERR_INVALID_WRITE = -700,
    MC_ERR_INVALID_READ = -701,
    MC_ERR_INVALID_REPLICA = -702,
    MC_ERR_REPLICA_IS_NOT_READY = -703, /* known, not readable yet (put in flight, re-mount due) */
    MC_ERR_OBJECT_NOT_FOUND = -704,
    MC_ERR_OBJECT_ALREADY_EXISTS = -705,
    MC_ERR_OBJECT_HAS_LEASE = -706,
    MC_ERR_LEASE_EXPIRED = -707,
    MC_ERR_OBJECT_HAS_REPLICATION_TASK = -708,
    MC_ERR_TRANSFER_FAIL = -800,
    MC_ERR_RPC_FAIL = -900,
    MC_ERR_RPC_TIMEOUT = -901,
    MC_ERR_ETCD_OPERATION_ERROR = -1000,
    MC_ERR_ETCD_KEY_NOT_EXIST = -1001,
    MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS = -1010,
    MC_ERR_UNAVAILABLE_IN_CURRENT_MODE = -1011,
    MC_ERR_FILE_NOT_FOUND = -1100,
    MC_ERR_FILE_OPEN_FAIL = -1101,
    MC_ERR_FILE_READ_FAIL = -1102,
    MC_ERR_FILE_WRITE_FAIL = -1103,
    MC_ERR_UNABLE_OFFLOAD = -1300,        /* the master runs without --enable_offload */
    MC_ERR_UNABLE_OFFLOADING = -1301,     /* the client's local disk is not mounted for offload */
    MC_ERR_TASK_NOT_FOUND = -1400,        /* no such replica copy/move task (or forgotten) */
    MC_ERR_TASK_PENDING_LIMIT_EXCEEDED = -1401, /* the master holds its cap of unfinished tasks */
    MC_ERR_TENANT_QUOTA_EXCEEDED = -1700, /* the tenant's quota cannot hold the put */
    MC_ERR_TENANT_NOT_REGISTERED = -1701, /* strict multi-tenant mode: the tenant has no quota */
    MC_ERR_TENANT_NOT_EMPTY = -1702,      /* the tenant still owns objects or quota usage */

    /* Mooncake-C additions: -3000 and below, never used upstream. */
    MC_ERR_NO_MEMORY = -3000,        /* a local allocation failed */
    MC_ERR_OUT_OF_RANGE = -3001,     /* [addr, addr+len) outside registered memory */
    MC_ERR_PROTOCOL = -3002,         /* malformed frame: bad magic/version/length/body */
    MC_ERR_TOO_LARGE = -3003,        /* a frame, key, batch or value over its cap */
    MC_ERR_TIMEOUT = -3004,          /* a local deadline passed (transfer, connect) */
    MC_ERR_CONNECTION = -3005,       /* peer unreachable or connection lost */
    MC_ERR_BUSY = -3006,             /* refused because the resource is in use */
    MC_ERR_NOT_SUPPORTED = -3007,    /* feature not built or not valid for this backend */
    MC_ERR_CHECKSUM = -3008,         /* bytes did not match the committed checksum */
    MC_ERR_IO = -3009,               /* a system call failed (see the log for errno) */
    MC_ERR_CANCELED = -3010,         /* the operation was canceled before completion */
    MC_ERR_PERMISSION = -3011,       /* tenant/namespace or ownership check refused it */
    MC_ERR_SEGMENT_FENCED = -3012,   /* the owner no longer serves this memory (lost its master) */
    MC_ERR_AUTH = -3013,             /* no credentials, or they did not prove a key of the server */
} mc_status_t;

/* Static, never-NULL description of a status ("OBJECT_NOT_FOUND: ..."). */
MC_API const char *mc_status_str(int status);
/* Short symbolic name without description ("OBJECT_NOT_FOUND"); "UNKNOWN" if not a status. */
MC_API const char *mc_status_name(int status);

#ifdef __cplusplus
}
#endif
#endif
