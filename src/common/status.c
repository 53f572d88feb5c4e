/* Names and descriptions of mc_status_t; the table is the one place a code is described. */
#include "mooncake/status.h"

#include <stddef.h>

struct status_entry {
    int code;
    const char *name;
    const char *text;
};

static const struct status_entry status_table[] = {
    {MC_OK, "OK", "OK: success"},
    {MC_ERR_INTERNAL, "INTERNAL_ERROR", "INTERNAL_ERROR: internal error"},
    {MC_ERR_BUFFER_OVERFLOW, "BUFFER_OVERFLOW", "BUFFER_OVERFLOW: buffer too small"},
    {MC_ERR_SHARD_INDEX_OUT_OF_RANGE, "SHARD_INDEX_OUT_OF_RANGE", "SHARD_INDEX_OUT_OF_RANGE: shard index out of range"},
    {MC_ERR_SEGMENT_NOT_FOUND, "SEGMENT_NOT_FOUND", "SEGMENT_NOT_FOUND: no such segment"},
    {MC_ERR_SEGMENT_ALREADY_EXISTS, "SEGMENT_ALREADY_EXISTS", "SEGMENT_ALREADY_EXISTS: segment already mounted/registered"},
    {MC_ERR_CLIENT_NOT_FOUND, "CLIENT_NOT_FOUND", "CLIENT_NOT_FOUND: unknown client"},
    {MC_ERR_NO_AVAILABLE_HANDLE, "NO_AVAILABLE_HANDLE", "NO_AVAILABLE_HANDLE: no space available"},
    {MC_ERR_INVALID_VERSION, "INVALID_VERSION", "INVALID_VERSION: version mismatch"},
    {MC_ERR_INVALID_KEY, "INVALID_KEY", "INVALID_KEY: key empty, too long or not allowed"},
    {MC_ERR_WRITE_FAIL, "WRITE_FAIL", "WRITE_FAIL: write failed"},
    {MC_ERR_INVALID_PARAMS, "INVALID_PARAMS", "INVALID_PARAMS: invalid parameters"},
    {MC_ERR_ILLEGAL_CLIENT, "ILLEGAL_CLIENT", "ILLEGAL_CLIENT: request from a client that does not own the object"},
    {MC_ERR_INVALID_WRITE, "INVALID_WRITE", "INVALID_WRITE: invalid write"},
    {MC_ERR_INVALID_READ, "INVALID_READ", "INVALID_READ: invalid read"},
    {MC_ERR_INVALID_REPLICA, "INVALID_REPLICA", "INVALID_REPLICA: invalid replica"},
    {MC_ERR_REPLICA_IS_NOT_READY, "REPLICA_IS_NOT_READY", "REPLICA_IS_NOT_READY: not readable yet (put in flight, or segment awaiting its re-mount); retry"},
    {MC_ERR_OBJECT_NOT_FOUND, "OBJECT_NOT_FOUND", "OBJECT_NOT_FOUND: no such object"},
    {MC_ERR_OBJECT_ALREADY_EXISTS, "OBJECT_ALREADY_EXISTS", "OBJECT_ALREADY_EXISTS: object already exists"},
    {MC_ERR_OBJECT_HAS_LEASE, "OBJECT_HAS_LEASE", "OBJECT_HAS_LEASE: object is leased by a reader"},
    {MC_ERR_LEASE_EXPIRED, "LEASE_EXPIRED", "LEASE_EXPIRED: read lease expired before the transfer finished"},
    {MC_ERR_OBJECT_HAS_REPLICATION_TASK, "OBJECT_HAS_REPLICATION_TASK", "OBJECT_HAS_REPLICATION_TASK: object has a replication task"},
    {MC_ERR_TRANSFER_FAIL, "TRANSFER_FAIL", "TRANSFER_FAIL: data transfer failed"},
    {MC_ERR_RPC_FAIL, "RPC_FAIL", "RPC_FAIL: RPC failed"},
    {MC_ERR_RPC_TIMEOUT, "RPC_TIMEOUT", "RPC_TIMEOUT: RPC timed out"},
    {MC_ERR_ETCD_OPERATION_ERROR, "ETCD_OPERATION_ERROR", "ETCD_OPERATION_ERROR: etcd operation failed"},
    {MC_ERR_ETCD_KEY_NOT_EXIST, "ETCD_KEY_NOT_EXIST", "ETCD_KEY_NOT_EXIST: etcd key does not exist"},
    {MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS, "UNAVAILABLE_IN_CURRENT_STATUS", "UNAVAILABLE_IN_CURRENT_STATUS: not available in the current status"},
    {MC_ERR_UNAVAILABLE_IN_CURRENT_MODE, "UNAVAILABLE_IN_CURRENT_MODE", "UNAVAILABLE_IN_CURRENT_MODE: not available in the current mode"},
    {MC_ERR_FILE_NOT_FOUND, "FILE_NOT_FOUND", "FILE_NOT_FOUND: file not found"},
    {MC_ERR_FILE_OPEN_FAIL, "FILE_OPEN_FAIL", "FILE_OPEN_FAIL: cannot open file"},
    {MC_ERR_FILE_READ_FAIL, "FILE_READ_FAIL", "FILE_READ_FAIL: cannot read file"},
    {MC_ERR_FILE_WRITE_FAIL, "FILE_WRITE_FAIL", "FILE_WRITE_FAIL: cannot write file"},
    {MC_ERR_UNABLE_OFFLOAD, "UNABLE_OFFLOAD", "UNABLE_OFFLOAD: the master runs without --enable_offload"},
    {MC_ERR_UNABLE_OFFLOADING, "UNABLE_OFFLOADING", "UNABLE_OFFLOADING: the client has no local disk mounted for offload"},
    {MC_ERR_TASK_NOT_FOUND, "TASK_NOT_FOUND", "TASK_NOT_FOUND: no such task (unknown, forgotten, or created before a master restart)"},
    {MC_ERR_TASK_PENDING_LIMIT_EXCEEDED, "TASK_PENDING_LIMIT_EXCEEDED", "TASK_PENDING_LIMIT_EXCEEDED: the master holds its cap of unfinished tasks"},
    {MC_ERR_TENANT_QUOTA_EXCEEDED, "TENANT_QUOTA_EXCEEDED", "TENANT_QUOTA_EXCEEDED: the tenant's memory quota cannot hold it"},
    {MC_ERR_TENANT_NOT_REGISTERED, "TENANT_NOT_REGISTERED", "TENANT_NOT_REGISTERED: the tenant has no quota policy (strict multi-tenant mode)"},
    {MC_ERR_TENANT_NOT_EMPTY, "TENANT_NOT_EMPTY", "TENANT_NOT_EMPTY: the tenant still owns objects or quota usage"},
    {MC_ERR_NO_MEMORY, "NO_MEMORY", "NO_MEMORY: local allocation failed"},
    {MC_ERR_OUT_OF_RANGE, "OUT_OF_RANGE", "OUT_OF_RANGE: address range outside registered memory"},
    {MC_ERR_PROTOCOL, "PROTOCOL_ERROR", "PROTOCOL_ERROR: malformed frame or message"},
    {MC_ERR_TOO_LARGE, "TOO_LARGE", "TOO_LARGE: frame, key, batch or value over its limit"},
    {MC_ERR_TIMEOUT, "TIMEOUT", "TIMEOUT: deadline passed"},
    {MC_ERR_CONNECTION, "CONNECTION_ERROR", "CONNECTION_ERROR: peer unreachable or connection lost"},
    {MC_ERR_BUSY, "BUSY", "BUSY: resource in use"},
    {MC_ERR_NOT_SUPPORTED, "NOT_SUPPORTED", "NOT_SUPPORTED: not supported by this build or backend"},
    {MC_ERR_CHECKSUM, "CHECKSUM_MISMATCH", "CHECKSUM_MISMATCH: data does not match its checksum"},
    {MC_ERR_IO, "IO_ERROR", "IO_ERROR: system call failed"},
    {MC_ERR_CANCELED, "CANCELED", "CANCELED: operation canceled"},
    {MC_ERR_PERMISSION, "PERMISSION_DENIED", "PERMISSION_DENIED: not allowed for this tenant or client"},
    {MC_ERR_SEGMENT_FENCED, "SEGMENT_FENCED", "SEGMENT_FENCED: the owner stopped serving this memory (it lost contact with the master)"},
    {MC_ERR_AUTH, "AUTH_FAILED", "AUTH_FAILED: missing or wrong credentials (see --auth_token_file / MC_AUTH_TOKEN_FILE)"},
};

static const struct status_entry *status_find(int status)
{
    for (size_t i = 0; i < sizeof(status_table) / sizeof(status_table[0]); i++) {
        if (status_table[i].code == status)
            return &status_table[i];
    }
    return NULL;
}

const char *mc_status_str(int status)
{
    const struct status_entry *e = status_find(status);
    return e ? e->text : "UNKNOWN: unknown status code";
}

const char *mc_status_name(int status)
{
    const struct status_entry *e = status_find(status);
    return e ? e->name : "UNKNOWN";
}
