"""More of upstream's MooncakeDistributedStore methods, mixed into mooncake.store's class.

Each method has upstream's signature, defaults and return convention
(mooncake-integration/store/store_py.cpp and mooncake-store/src/real_client.cpp); python/README.md,
"Store", describes what each one honours here and what it refuses, and why:

* init_all: upstream's older entry point (etcd metadata at 127.0.0.1:2379, the default master);
* mount_segment, allocate_and_mount_segment, unmount_segment, unmount_and_free_segment: extra
  segments (src/client/store_segments.c);
* get_offload_rpc_read_count: disk reads this storage server served (read_stats);
  unmount_local_disk_segment: not served (0; a storage server unmounts its disk when closed);
* put_from_with_metadata: one object laid out as metadata bytes then data bytes;
* batch_replica_clear: MC_OP_BATCH_REPLICA_CLEAR at the master (mc_store_batch_replica_clear);
* the batch get/put sessions and their ranged reads and writes;
* create_copy_task, create_move_task, query_task: the master's replica tasks
  (mc_store_create_copy_task & co).

Session state lives in this object (a dict per kind, one lock); the data moves through the
store's verified calls (see the comments of each method).
"""

import ctypes
import logging
import threading
import time

from ._config import default_kv_lease_ttl_ms

log = logging.getLogger("mooncake")

INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704
OBJECT_ALREADY_EXISTS = -705
LEASE_EXPIRED = -707
SEGMENT_NOT_FOUND = -101
NOT_SUPPORTED = -3007       # mc_status_t MC_ERR_NOT_SUPPORTED
_SEG_FILE, _SEG_ALLOC = 1, 2  # mc_store_seg_kind_t

INIT_ALL_HOSTNAME = "localhost:12345"   # upstream RealClient::initAll_internal
INIT_ALL_METADATA = "127.0.0.1:2379"    # etcd, no scheme
INIT_ALL_LOCAL_BUFFER = 1 << 30
INIT_ALL_MASTER = "127.0.0.1:50051"


_SESSIONS_INIT = threading.Lock()


def _is_uint(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


class _PutSession:
    __slots__ = ("size", "buf", "ptr", "inflight", "writable", "cfg", "group_id")

    def __init__(self, size, cfg, group_id):
        self.size = size
        self.buf = (ctypes.c_ubyte * max(size, 1))()
        self.ptr = ctypes.addressof(self.buf)
        self.inflight = 0
        self.writable = True
        self.cfg = cfg              # the config's attributes at start (_cfg_attrs), or None
        self.group_id = group_id


class StoreMoreMixin:
    """init_all, offload counters, put_from_with_metadata, batch sessions, tasks."""

    # ---- setup -------------------------------------------------------------------------

    def init_all(self, protocol, device_name, mount_segment_size=16 * 1024 * 1024):
        """Upstream's older setup: INVALID_PARAMS (-600) on a client already set up; else
        setup("localhost:12345", etcd at 127.0.0.1:2379, mount_segment_size, 1 GiB local
        buffer, protocol, device_name, master 127.0.0.1:50051), as upstream does (none of the
        environment variables setup() reads are consulted). Returns setup's result."""
        if not isinstance(protocol, str) or not isinstance(device_name, str):
            raise TypeError("init_all(): protocol and device_name must be str")
        if not _is_uint(mount_segment_size):
            raise TypeError("init_all(): mount_segment_size must be a non-negative int")
        if self.is_setup():
            log.error("init_all: the client is already initialized")
            return INVALID_PARAMS
        return self.setup(INIT_ALL_HOSTNAME, INIT_ALL_METADATA, mount_segment_size,
                          INIT_ALL_LOCAL_BUFFER, protocol, device_name, INIT_ALL_MASTER)

    # ---- extra segments ------------------------------------------------------------------

    def mount_segment(self, path, size, offset=0, protocol="tcp", location=""):
        """Contributes [offset, offset+size) of the file at path (mapped MAP_SHARED; offset
        page-aligned, the range inside the file) as one more segment of this client. Returns
        upstream's dict {"ret": 0 or -1, "segment_ids": ["<u64>-<u64>", ...]}; the ids are for
        unmount_segment. protocol "tcp" or "rdma" (the transfer engine picks the transport);
        location: the memory's location ("" = "cpu:0")."""
        out = {"ret": -1, "segment_ids": []}
        if not _seg_args(path, size, offset, protocol, location, "mount_segment"):
            return out
        st, raw = self._segment_mount_file(path, offset, size, location)
        if st == 0:
            out = {"ret": 0, "segment_ids": [_uuid_str(raw)]}
        return out

    def allocate_and_mount_segment(self, size, protocol="tcp", location=""):
        """Allocates size bytes (rounded up to 4 MiB, as upstream) of shareable memory and
        contributes them as one more segment. Returns {"ret": 0 or -1, "segment_ids": [...],
        "allocated_size": bytes}; unmount_and_free_segment gives them back."""
        out = {"ret": -1, "segment_ids": [], "allocated_size": 0}
        if not _seg_args(None, size, 0, protocol, location, "allocate_and_mount_segment"):
            return out
        st, raw, got = self._segment_alloc_mount(size, location)
        if st == 0:
            out = {"ret": 0, "segment_ids": [_uuid_str(raw)], "allocated_size": got}
        return out

    def unmount_segment(self, segment_ids, grace_period_seconds=0):
        """Unmounts segments mounted with mount_segment (their objects are dropped) and unmaps
        them. grace_period_seconds > 0: a graceful unmount, the master keeps the segment
        readable until no read lease on it is left, and the mapping is released once the
        master has dropped it. Returns 0, or the first error (-1 for an id that is not one of
        this client's mount_segment ids; the master's code for a failed unmount)."""
        return self._unmount_ids(segment_ids, grace_period_seconds, _SEG_FILE, "unmount_segment")

    def unmount_and_free_segment(self, segment_ids, grace_period_seconds=0):
        """unmount_segment for segments from allocate_and_mount_segment; frees their memory."""
        return self._unmount_ids(segment_ids, grace_period_seconds, _SEG_ALLOC,
                                 "unmount_and_free_segment")

    def _unmount_ids(self, segment_ids, grace_period_seconds, kind, what):
        if isinstance(segment_ids, str):
            raise TypeError(f"{what}(): segment_ids must be a list of str")
        segment_ids = list(segment_ids)
        if not _is_uint(grace_period_seconds):
            raise TypeError(f"{what}(): grace_period_seconds must be a non-negative int")
        if not self.is_setup():
            log.error("Client not initialized")
            return -1
        first = 0
        for sid in segment_ids:
            raw = _uuid_raw(sid)
            if raw is None:
                log.error("Invalid segment_id: %s", sid)
                first = first or -1
                continue
            st = self._segment_unmount(raw, kind, grace_period_seconds * 1000)
            if st == NOT_SUPPORTED:         # a dummy client: upstream's -1 ("requires RealClient")
                st = -1
            elif st == SEGMENT_NOT_FOUND:
                log.error("segment_id not found in %s records: %s",
                          "mounted" if kind == _SEG_FILE else "allocated", sid)
                st = -1
            first = first or st
        return first

    # ---- the SSD offload tier ----------------------------------------------------------

    def get_offload_rpc_read_count(self):
        """Reads served to peers from this client's SSD offload tier (BatchGetOffloadObject
        calls that read a value); 0 without one, and for a dummy, as upstream."""
        if self._is_dummy() or not self.is_setup():
            return 0
        return self.read_stats()["offload_reads_served"]

    def unmount_local_disk_segment(self, grace_period_seconds=0):
        """Upstream drains the SSD offload segment; without offload it logs a warning and
        returns 0. -1 on a client that is not set up or a dummy client, as upstream."""
        if not _is_uint(grace_period_seconds):
            raise TypeError("unmount_local_disk_segment(): grace_period_seconds must be a "
                            "non-negative int")
        if not self.is_setup():
            log.error("unmount_local_disk_segment: client not initialized")
            return -1
        if self._is_dummy():
            log.error("unmount_local_disk_segment requires RealClient")
            return -1
        log.warning("action=drain_local_disk_segment, warn=ssd_offload_not_enabled")
        return 0

    # ---- put_from_with_metadata --------------------------------------------------------

    def put_from_with_metadata(self, key, buffer_ptr, metadata_buffer_ptr, size,
                               metadata_size, config=None):
        """One object: metadata_size bytes at metadata_buffer_ptr, then size bytes at
        buffer_ptr (both inside registered buffers). Upstream's conventions: INVALID_PARAMS
        (-600) before setup; -1 with prefer_alloc_in_same_node; 0 without storing anything
        when size is 0; otherwise 0 or, on failure, the *positive* code (upstream returns
        -toInt(error) on this path only)."""
        for name, v in (("buffer_ptr", buffer_ptr), ("metadata_buffer_ptr", metadata_buffer_ptr),
                        ("size", size), ("metadata_size", metadata_size)):
            if not _is_uint(v):
                raise TypeError(f"put_from_with_metadata(): {name} must be a non-negative int")
        if not self.is_setup():
            log.error("Client is not initialized")
            return INVALID_PARAMS
        if config is not None and config.prefer_alloc_in_same_node:
            log.error("prefer_alloc_in_same_node is not supported.")
            return -1
        if size == 0:
            log.warning("Attempting to put empty data for key: %s", key)
            return 0
        ptrs, sizes = [], []
        if metadata_size:
            ptrs.append(metadata_buffer_ptr)
            sizes.append(metadata_size)
        ptrs.append(buffer_ptr)
        sizes.append(size)
        args = ([key], [ptrs], [sizes]) if config is None else ([key], [ptrs], [sizes], config)
        rc = self.batch_put_from_multi_buffers(*args)[0]
        return 0 if rc == 0 else -rc

    # ---- batch get sessions ------------------------------------------------------------

    def _sessions(self):
        """(get sessions {key: lease deadline}, put sessions {key: _PutSession}, their lock)."""
        try:
            return self.__mc_sessions
        except AttributeError:
            with _SESSIONS_INIT:
                if not hasattr(self, "_StoreMoreMixin__mc_sessions"):
                    self.__mc_sessions = ({}, {}, threading.Condition())
            return self.__mc_sessions

    def close(self):
        """Closes the client; open get and put sessions end with it (nothing is stored)."""
        gets, puts, cv = self._sessions()
        with cv:
            gets.clear()
            puts.clear()
        self._local_buffer_size = None  # a BufferPool made now refuses: not set up
        return super().close()

    def batch_get_session_start(self, keys):
        """Looks every key up once (one batch lookup) and opens a get session on the found
        ones until their read lease ends (--default_kv_lease_ttl from now). Per key: 0, or the
        lookup's code (OBJECT_NOT_FOUND, ...). [] before setup or for no keys, as upstream."""
        keys = list(keys)
        if not self.is_setup():
            log.error("Client is not initialized")
            return []
        if not keys:
            return []
        t0 = time.monotonic()
        descs = self._batch_get_replica_desc(keys)
        deadline = t0 + default_kv_lease_ttl_ms() / 1000.0
        gets, _, cv = self._sessions()
        out = []
        with cv:
            for k in keys:
                if descs.get(k):
                    gets[k] = deadline
                    out.append(0)
                else:
                    gets.pop(k, None)
                    out.append(OBJECT_NOT_FOUND)
        return out

    def batch_get_into_multi_buffer_ranges(self, keys, all_buffer_ptrs, all_sizes,
                                           all_src_offsets):
        """For key i, copy all_sizes[i][j] bytes from offset all_src_offsets[i][j] of the
        object to all_buffer_ptrs[i][j] (inside registered buffers). Per key: the bytes copied,
        LEASE_EXPIRED when its session's lease ended (the session is closed), or
        INVALID_PARAMS (no session, lists of different lengths, a range past the object or the
        buffer). Each key is read once, whole and checksum-verified, and its ranges are copied
        out of that read (a sub-range read alone could not be verified)."""
        keys = list(keys)
        res = [INVALID_PARAMS] * len(keys)
        if not self.is_setup():
            log.error("Client is not initialized")
            return []
        if not len(keys) == len(all_buffer_ptrs) == len(all_sizes) == len(all_src_offsets):
            log.error("Invalid get ranges args")
            return res
        gets, _, cv = self._sessions()
        now = time.monotonic()
        key_index, fk, fb, fd, fs, fz, owner = {}, [], [], [], [], [], []
        with cv:
            for i, k in enumerate(keys):
                bufs, sizes, offs = all_buffer_ptrs[i], all_sizes[i], all_src_offsets[i]
                if not len(bufs) == len(sizes) == len(offs):
                    continue
                dl = gets.get(k)
                if dl is None:
                    continue
                if now >= dl:
                    del gets[k]
                    res[i] = LEASE_EXPIRED
                    continue
                ki = key_index.setdefault(k, len(key_index))
                res[i] = 0
                for j in range(len(bufs)):
                    fk.append(ki)
                    fb.append(bufs[j])
                    fd.append(0)
                    fs.append(offs[j])
                    fz.append(sizes[j])
                    owner.append(i)
        if not owner:
            return res
        got = self._read_ranges(list(key_index), fk, fb, fd, fs, fz)
        for i, r in zip(owner, got):
            if res[i] >= 0:
                res[i] = res[i] + r if r >= 0 else r
        return res

    def batch_get_session_end(self, keys):
        """Closes the get sessions of keys (unknown keys are ignored). 0; -1 before setup."""
        if not self.is_setup():
            log.error("Client is not initialized")
            return -1
        gets, _, cv = self._sessions()
        with cv:
            for k in keys:
                gets.pop(k, None)
        return 0

    # ---- batch put sessions ------------------------------------------------------------

    def batch_put_session_start(self, keys, sizes, config=None):
        """Opens a put session per key: ranges are written into it with
        batch_put_from_multi_buffer_ranges and the object becomes readable, checksummed and
        replicated as config says, at batch_put_session_end. Per key: 0; INVALID_PARAMS for
        a key that has a session already (every key when keys and sizes, or config.group_ids,
        differ in length, or with a setting puts refuse); OBJECT_ALREADY_EXISTS for a key
        already stored. [] before setup."""
        keys, sizes = list(keys), list(sizes)
        if not self.is_setup():
            log.error("Client is not initialized")
            return []
        if len(keys) != len(sizes) or not all(_is_uint(s) for s in sizes):
            log.error("Invalid batch_put_session_start args")
            return [INVALID_PARAMS] * len(keys)
        if config is not None:
            if config.group_ids is not None and len(config.group_ids) != len(keys):
                log.error("batch_put_session_start: group_ids.size()=%d, keys.size()=%d, "
                          "error=invalid_group_ids", len(config.group_ids), len(keys))
                return [INVALID_PARAMS] * len(keys)
            if _refused(config):
                log.error("batch_put_session_start: %s is not supported by Mooncake-C",
                          _refused(config))
                return [INVALID_PARAMS] * len(keys)
        exist = self.batch_is_exist(keys) if keys else []
        _, puts, cv = self._sessions()
        out = []
        with cv:
            attrs = _cfg_attrs(config)
            for n, (k, sz, ex) in enumerate(zip(keys, sizes, exist)):
                if k in puts:
                    log.error("Put session already exists for key: %s", k)
                    out.append(INVALID_PARAMS)
                elif ex == 1:
                    out.append(OBJECT_ALREADY_EXISTS)
                elif ex < 0:
                    out.append(ex)
                else:
                    gid = config.group_ids[n] if config is not None and \
                        config.group_ids is not None else None
                    puts[k] = _PutSession(sz, attrs, gid)
                    out.append(0)
        return out

    def batch_put_from_multi_buffer_ranges(self, keys, all_buffer_ptrs, all_sizes,
                                           all_dst_offsets):
        """For key i, all_sizes[i][j] bytes at all_buffer_ptrs[i][j] (inside a registered
        buffer) go to offset all_dst_offsets[i][j] of its open put session. Per key: the bytes
        written, or INVALID_PARAMS (no open session, lists of different lengths, a range past
        the object's size or outside registered memory)."""
        keys = list(keys)
        res = [INVALID_PARAMS] * len(keys)
        if not self.is_setup():
            log.error("Client is not initialized")
            return []
        if not len(keys) == len(all_buffer_ptrs) == len(all_sizes) == len(all_dst_offsets):
            log.error("Invalid put ranges args")
            return res
        _, puts, cv = self._sessions()
        work = []
        with cv:
            for i, k in enumerate(keys):
                bufs, sizes, offs = all_buffer_ptrs[i], all_sizes[i], all_dst_offsets[i]
                if not len(bufs) == len(sizes) == len(offs):
                    continue
                s = puts.get(k)
                if s is None or s.writable is False:
                    continue
                ok = all(_is_uint(o) and _is_uint(n) and o + n <= s.size and
                         (n == 0 or self._buffer_room(b) >= n)
                         for b, n, o in zip(bufs, sizes, offs))
                if not ok:
                    log.error("put ranges: key %s: a range is past the object (%d bytes) or "
                              "outside registered memory", k, s.size)
                    continue
                s.inflight += 1
                work.append((i, s, bufs, sizes, offs))
        for i, s, bufs, sizes, offs in work:
            try:
                for b, n, o in zip(bufs, sizes, offs):
                    if n:
                        ctypes.memmove(s.ptr + o, b, n)
                res[i] = sum(sizes)
            finally:
                with cv:
                    s.inflight -= 1
                    cv.notify_all()
        return res

    def _seal(self, keys):
        """Seals the sessions of keys (no new range writes) and waits for those in flight.
        Returns {key: session} of the keys that had one."""
        _, puts, cv = self._sessions()
        with cv:
            found = {}
            for k in keys:
                s = puts.get(k)
                if s is not None:
                    found[k] = s
                    s.writable = False
            cv.wait_for(lambda: all(s.inflight == 0 for s in found.values()))
        return found

    def batch_put_session_end(self, keys):
        """Stores the written bytes of each key's session (one batch put, checksummed and
        replicated as the session's config said) and closes the sessions that succeeded. Per
        key: 0, the put's code (the session stays open for a retry or a revoke), or
        INVALID_PARAMS without a session."""
        keys = list(keys)
        if not self.is_setup():
            log.error("Client is not initialized")
            return []
        res = [INVALID_PARAMS] * len(keys)
        found = self._seal(keys)
        todo = [i for i, k in enumerate(keys) if k in found]
        if not todo:
            return res
        groups = {}                 # the same config at start: one batch put
        for i in todo:
            groups.setdefault(found[keys[i]].cfg, []).append(i)
        _, puts, cv = self._sessions()
        for attrs, idx in groups.items():
            ks = [keys[i] for i in idx]
            sess = [found[k] for k in ks]
            regs = [s.ptr for s in sess if self.register_buffer(s.ptr, max(s.size, 1)) == 0]
            try:
                args = (ks, [s.ptr for s in sess], [s.size for s in sess])
                if attrs is None:
                    got = self.batch_put_from(*args)
                else:
                    gids = [s.group_id for s in sess]
                    got = self.batch_put_from(*args, _cfg_make(attrs, gids))
            finally:
                for p in regs:
                    self.unregister_buffer(p)
            with cv:
                for i, k, r in zip(idx, ks, got):
                    res[i] = r
                    if r == 0:
                        puts.pop(k, None)
                    else:
                        found[k].writable = True
        return res

    def batch_put_session_revoke(self, keys):
        """Drops each key's put session and what was written into it: nothing is stored. Per
        key: 0, or INVALID_PARAMS without a session."""
        keys = list(keys)
        if not self.is_setup():
            log.error("Client is not initialized")
            return []
        found = self._seal(keys)
        _, puts, cv = self._sessions()
        with cv:
            for k in found:
                puts.pop(k, None)
        return [0 if k in found else INVALID_PARAMS for k in keys]

    # ---- replica clear ------------------------------------------------------------------

    def batch_replica_clear(self, keys, segment_name=""):
        """Upstream's BatchReplicaClear: the master drops the replicas of each key this client
        wrote (its last put or upsert) whose read lease has ended: all of them when
        segment_name is "", else only those in that segment (the object goes with its last
        replica). Returns the keys cleared; the others are skipped with a log line saying why
        (not found, another client's, leased, being written, no replica there). [] before
        setup or when the master cannot be asked."""
        if isinstance(keys, str):
            raise TypeError("batch_replica_clear(): keys must be a list of str")
        keys = list(keys)
        if not isinstance(segment_name, str):
            raise TypeError("batch_replica_clear(): segment_name must be str")
        if not self.is_setup():
            log.error("Client is not initialized")
            return []
        cleared = []
        for i in range(0, len(keys), 16384):
            part = keys[i:i + 16384]
            for k, st in zip(part, self._batch_replica_clear(part, segment_name)):
                if st == 0:
                    cleared.append(k)
                else:
                    log.warning("BatchReplicaClear: key=%s not cleared (%d)", k, st)
        return cleared

    # ---- replica tasks -----------------------------------------------------------------

    def create_copy_task(self, key, targets):
        """Upstream's CreateCopyTask: the master queues a copy of key's value to each target
        segment, run by the client that owns a source replica (its bytes checked against the
        committed checksum). Returns ((id_high, id_low), 0), or ((0, 0), error) with upstream's
        log line: OBJECT_NOT_FOUND, INVALID_PARAMS (no target, more than 8, a duplicate, one
        not mounted), UNAVAILABLE_IN_CURRENT_STATUS (a draining target),
        TASK_PENDING_LIMIT_EXCEEDED. A target that already holds a replica is left as is."""
        if not isinstance(key, str) or isinstance(targets, str):
            raise TypeError("create_copy_task(key: str, targets: list[str])")
        targets = list(targets)
        if not all(isinstance(t, str) for t in targets):
            raise TypeError("create_copy_task(key: str, targets: list[str])")
        st, hi, lo = self._create_copy_task(key, targets)
        if st != 0:
            log.error("Copy failed for key: %s, error: %d", key, st)
            return ((0, 0), st)
        return ((hi, lo), 0)

    def create_move_task(self, key, source, target):
        """Upstream's CreateMoveTask: key's replica on source moves to target (run by source's
        owner; the source's space is freed once the read leases on it end). ((id_high,
        id_low), 0) or ((0, 0), error): as create_copy_task, and INVALID_PARAMS when source ==
        target or source holds no replica of key."""
        for v in (key, source, target):
            if not isinstance(v, str):
                raise TypeError("create_move_task(key: str, source: str, target: str)")
        st, hi, lo = self._create_move_task(key, source, target)
        if st != 0:
            log.error("Move failed for key: %s, error: %d", key, st)
            return ((0, 0), st)
        return ((hi, lo), 0)

    def query_task(self, task_id):
        """Upstream's QueryTask: (QueryTaskResponse, 0), or (None, TASK_NOT_FOUND = -1400) for
        an id the master does not know (never created, forgotten past
        --max_total_finished_tasks, another tenant's, or created before a master restart:
        tasks live in the master's memory)."""
        if not (isinstance(task_id, tuple) and len(task_id) == 2 and
                all(_is_uint(x) and x < 1 << 64 for x in task_id)):
            raise TypeError("query_task(): task_id must be a (int, int) UUID")
        st, ttype, tstatus, created, updated, client, message = self._query_task(*task_id)
        if st != 0:
            log.error("QueryTask failed for task_id: %d-%d, error: %d", task_id[0], task_id[1],
                      st)
            return (None, st)
        from .store import QueryTaskResponse
        client_id = (int.from_bytes(client[:8], "little"), int.from_bytes(client[8:], "little"))
        return (QueryTaskResponse._make(task_id, ttype, tstatus, created, updated, client_id,
                                        message), 0)


def _seg_args(path, size, offset, protocol, location, what):
    """Upstream's argument types (TypeError), then what it refuses with ret -1 (logged)."""
    if path is not None and not isinstance(path, str):
        raise TypeError(f"{what}(): path must be str")
    if not (_is_uint(size) and _is_uint(offset)):
        raise TypeError(f"{what}(): size and offset must be non-negative ints")
    if not isinstance(protocol, str) or not isinstance(location, str):
        raise TypeError(f"{what}(): protocol and location must be str")
    if size == 0:
        log.error("%s: size is 0", what)
        return False
    if protocol not in ("tcp", "rdma", ""):
        log.error("%s: protocol %r is not available in Mooncake-C (tcp, rdma)", what, protocol)
        return False
    return True


def _uuid_str(raw):
    """Upstream's UuidToString: the two 64-bit halves in decimal, "first-second"."""
    return f"{int.from_bytes(raw[:8], 'little')}-{int.from_bytes(raw[8:], 'little')}"


def _uuid_raw(sid):
    """Upstream's StringToUuid, back to our 16 bytes; None when it does not parse."""
    if not isinstance(sid, str):
        return None
    a, sep, b = sid.partition("-")
    if not sep or not a.isdigit() or not b.isdigit():
        return None
    x, y = int(a), int(b)
    if x >= 1 << 64 or y >= 1 << 64:
        return None
    return x.to_bytes(8, "little") + y.to_bytes(8, "little")


def _refused(cfg):
    """The ReplicateConfig settings every put refuses (python/README.md, ReplicateConfig)."""
    if cfg.nof_replica_num:
        return "nof_replica_num"
    if cfg.dfs_replica_num:
        return "dfs_replica_num"
    if cfg.preferred_nof_segments:
        return "preferred_nof_segments"
    if cfg.prefer_alloc_in_same_node:
        return "prefer_alloc_in_same_node"
    return None


_CFG_FIELDS = ("replica_num", "nof_replica_num", "dfs_replica_num", "soft_pin_action",
               "soft_pin_ttl_ms", "with_hard_pin", "preferred_segments",
               "preferred_nof_segments", "preferred_segment", "prefer_alloc_in_same_node",
               "data_type")


def _cfg_attrs(cfg):
    """A hashable snapshot of a ReplicateConfig without its group_ids (kept per key)."""
    if cfg is None:
        return None
    return tuple((f, tuple(v) if isinstance(v, list) else v)
                 for f in _CFG_FIELDS for v in (getattr(cfg, f),))


def _cfg_make(attrs, group_ids):
    from ._store import ReplicateConfig
    c = ReplicateConfig()
    for f, v in attrs:
        setattr(c, f, list(v) if isinstance(v, tuple) else v)
    if any(g is not None for g in group_ids):
        c.group_ids = [g if g is not None else "" for g in group_ids]
    return c
