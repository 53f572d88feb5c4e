"""``mc_store_rest_server``: a store client with upstream's REST API (upstream's
``mooncake.mooncake_store_service``), on Python's standard library only.

Flags (upstream's): ``--config PATH`` (JSON, else MooncakeConfig.load_from_env()),
``-D/--define key=value`` (overrides a config field; sizes, bools and ports are parsed),
``--port`` (8080; 0 = a free one), ``--max-wait-time`` (60 s of setup retries, one a second).
Ours: ``--host`` (0.0.0.0, as upstream binds). The log line ``REST API started on
<host>:<port>`` tells where it listens.

Endpoints, bodies and answers as upstream (JSON ``{"error": ...}`` on failure):

| endpoint | body / answer |
|---|---|
| PUT /api/put | ``{"key", "value"}`` (value a str, stored UTF-8) → ``{"status": "success"}``; 400 missing key or value |
| GET /api/get/<key> | 200 the bytes (application/octet-stream); 404 not found |
| GET /api/exist/<key> | ``{"exists": bool}`` |
| DELETE /api/remove/<key> | ``{"status": "success"}``; 500 when the remove fails (also a missing key) |
| DELETE /api/remove_all | ``{"status": "success removed N keys"}`` |
| POST /api/mount | ``{"size" (positive int), "protocol", "location"}`` → ``{"status", "segment_ids", "allocated_size"}`` |
| POST /api/unmount | ``{"segment_ids" (list or str), "grace_period_seconds"}`` |
| POST /api/mount_shm | ``{"name" (a /dev/shm name), "size", "offset", "protocol", "location"}`` → ``{"status", "segment_ids"}`` |
| POST /api/unmount_shm | ``{"segment_ids", "grace_period_seconds"}``; 500 + ``failed_segment_ids`` |
| POST /api/reconfigure | ``{"mode": "decode", "path", "size", ...}`` (make-before-break remount) or ``{"mode": "prefill"}`` |
| POST /api/unmount_local_disk | ``{"grace_period_seconds": 0..3600}``; 400 for a malformed body |

Input limits: a body over 100 MiB is refused with 413 before it is read (upstream's
client_max_size); a key over 4096 bytes (the store's limit) or with a NUL gets 400; a body that
is not JSON, or not an object, gets 500 with the parser's message (400 on
/api/unmount_local_disk), as upstream. Unknown paths get 404, a known path with another method
405. At most 64 connections are served at once (more are closed at accept); a connection idle
for 30 s is closed. Request bodies buffered at once, all connections together, are capped by
``--max-body-budget`` (1GB): a request reserves its Content-Length before its body is read and
releases it once answered (or failed, or its client gone); one that does not fit gets 503 with
``Retry-After: 1`` and its connection closed, before its body is read (a body over the budget
itself gets 413).

Authentication: with ``MC_AUTH_TOKEN_FILE`` set (the variable the store client itself reads)
every request must carry the cluster's HTTP challenge-response (docs/security.md, "HTTP
ports"): 401 with a challenge otherwise (a request with a body is refused before its body is
read), 403 for a tenant token (a cluster token is required: the API mounts and removes for
everyone), 503 while the replay cache is full. A token file that cannot be used stops the
program (exit 1) before it listens.
"""
import argparse
import http.server
import json
import logging
import os
import signal
import socketserver
import sys
import threading
import time
import urllib.parse

from . import _config
from ._core import (HTTP_AUTH_BUSY, HTTP_AUTH_OK, HttpAuthServer,  # src/common/http_auth.c
                    http_auth_reason)
from .mooncake_config import MooncakeConfig, _parse_bool, _parse_segment_size
from .store import MooncakeDistributedStore

MAX_BODY = 100 * 1024 * 1024       # upstream's aiohttp client_max_size
MAX_KEY = 4096                      # MC_STORE_KEY_MAX
MAX_CONNECTIONS = 64
DEFAULT_BODY_BUDGET = 1 << 30       # bytes of request bodies buffered at once, server-wide
BUDGET_RETRY_AFTER_S = 1
IDLE_TIMEOUT_S = 30
_MAX_UNMOUNT_LOCAL_DISK_GRACE_PERIOD_SECONDS = 3600

_TYPED_FIELDS = {"global_segment_size": _parse_segment_size,
                 "local_buffer_size": _parse_segment_size,
                 "enable_ssd_offload": _parse_bool, "enable_client_http_server": _parse_bool,
                 "client_http_port": int}

log = logging.getLogger("mooncake.store_service")


class _BadRequest(Exception):
    """A body the handler cannot use: (status, message)."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def _shm_name_to_path(name):
    if not isinstance(name, str) or not name:
        return None
    normalized = name[1:] if name.startswith("/") else name
    if not normalized or "/" in normalized or normalized in {".", ".."} or "\0" in normalized:
        return None
    return f"/dev/shm/{normalized}"


def _ok(**fields):
    return 200, {"status": "success", **fields}


def _err(status, message, **fields):
    return status, {"error": message, **fields}


class MooncakeStoreService:
    """The store client and the state of the REST API (mode, mounted segments)."""

    def __init__(self, config_path=None, cli_config=None):
        self.store = None
        self.current_mode = "prefill"
        self.mounted_segment_ids = []
        self.last_mount_info = {}
        self._state_lock = threading.Lock()
        self.config = (MooncakeConfig.from_file(config_path) if config_path
                       else MooncakeConfig.load_from_env())
        for key, value in (cli_config or {}).items():
            if hasattr(self.config, key):
                parse = _TYPED_FIELDS.get(key)
                setattr(self.config, key, parse(value) if parse and isinstance(value, str)
                        else value)
            else:
                log.warning("Ignoring unknown config field %r", key)
        log.info("Mooncake configuration loaded")

    def start_store_service(self, max_wait_time=60, shutdown_event=None):
        """setup() retried once a second for max_wait_time seconds; True once set up."""
        start, attempt = time.monotonic(), 0
        while True:
            if shutdown_event is not None and shutdown_event.is_set():
                return False
            elapsed = time.monotonic() - start
            if elapsed >= max_wait_time:
                log.error("Store startup failed: exceeded max wait time of %ss after %d "
                          "attempts", max_wait_time, attempt)
                return False
            attempt += 1
            c = self.config
            try:
                self.store = MooncakeDistributedStore()
                ret = self.store.setup({
                    "local_hostname": c.local_hostname, "metadata_server": c.metadata_server,
                    "global_segment_size": c.global_segment_size,
                    "local_buffer_size": c.local_buffer_size, "protocol": c.protocol,
                    "rdma_devices": c.device_name, "master_server_addr": c.master_server_address,
                    "enable_ssd_offload": c.enable_ssd_offload,
                    "ssd_offload_path": c.ssd_offload_path, "tenant_id": c.tenant_id,
                    "enable_client_http_server": c.enable_client_http_server,
                    "client_http_port": c.client_http_port})
                if ret == 0:
                    log.info("Store service started successfully on %s", c.local_hostname)
                    return True
                log.warning("Store startup failed (attempt %d): setup returned %d", attempt, ret)
            except (TypeError, ValueError, OSError) as e:
                log.warning("Store startup failed (attempt %d): %s", attempt, e)
            left = max_wait_time - (time.monotonic() - start)
            if left > 0:
                if shutdown_event is not None:
                    if shutdown_event.wait(min(1.0, left)):
                        return False
                else:
                    time.sleep(min(1.0, left))

    def stop(self):
        if self.store is not None:
            self.store.close()
            self.store = None
            log.info("Mooncake service stopped")

    # ---- handlers: (status, JSON object or bytes) ----------------------------------------

    def handle_put(self, data):
        key, raw_value = data.get("key"), data.get("value")
        if not key or raw_value is None:
            return _err(400, "Missing key or value")
        if not isinstance(key, str) or not isinstance(raw_value, str):
            return _err(400, "key and value must be strings")
        _check_key(key)
        if self.store.put(key, raw_value.encode()) != 0:
            return _err(500, "PUT operation failed")
        return _ok()

    def handle_get(self, key):
        _check_key(key)
        exists = self.store.is_exist(key)
        if exists == 0:
            return _err(404, "Key not found")
        if exists < 0:
            return _err(500, "Exist check failed")
        value = self.store.get(key)
        if value is None:
            return _err(500, "GET operation failed")
        if value == b"":
            exists = self.store.is_exist(key)
            if exists == 0:
                return _err(404, "Key not found")
            if exists < 0:
                return _err(500, "Exist check failed")
        return 200, bytes(value)

    def handle_exist(self, key):
        _check_key(key)
        exists = self.store.is_exist(key)
        if exists < 0:
            return _err(500, "Exist check failed")
        return 200, {"exists": exists > 0}

    def handle_remove(self, key):
        _check_key(key)
        if self.store.remove(key) != 0:
            return _err(500, "Remove operation failed")
        return _ok()

    def handle_remove_all(self, _data=None):
        ret = self.store.remove_all()
        if ret < 0:
            return _err(500, "RemoveAll operation failed")
        return 200, {"status": f"success removed {ret} keys"}

    def handle_mount(self, data):
        size = data.get("size")
        protocol = data.get("protocol", self.config.protocol)
        location = data.get("location", "")
        if type(size) is not int or size <= 0:
            return _err(400, "Invalid size, must be a positive integer")
        result = self.store.allocate_and_mount_segment(size, protocol, location)
        if result["ret"] != 0:
            return _err(500, f"Allocate and mount failed, ret={result['ret']}")
        return _ok(segment_ids=list(result["segment_ids"]),
                   allocated_size=result["allocated_size"])

    def handle_unmount(self, data):
        segment_ids = _segment_ids(data)
        if not segment_ids:
            return _err(400, "Missing segment_ids")
        ret = self.store.unmount_and_free_segment(segment_ids,
                                                  data.get("grace_period_seconds", 0))
        if ret != 0:
            return _err(500, f"Unmount and free failed, ret={ret}")
        return _ok()

    def handle_mount_shm(self, data):
        path = _shm_name_to_path(data.get("name"))
        offset = data.get("offset", 0)
        size = data.get("size")
        protocol = data.get("protocol", self.config.protocol)
        location = data.get("location", "")
        if not path or size is None:
            return _err(400, "Missing or invalid name or size")
        result = self.store.mount_segment(path, size, offset, protocol, location)
        if result["ret"] != 0:
            return _err(500, f"Mount failed, ret={result['ret']}")
        return _ok(segment_ids=list(result["segment_ids"]))

    def handle_unmount_shm(self, data):
        segment_ids = _segment_ids(data)
        if not segment_ids:
            return _err(400, "Missing segment_ids")
        grace = data.get("grace_period_seconds", 0)
        failed = []
        with self._state_lock:
            for sid in segment_ids:
                if self.store.unmount_segment([sid], grace) != 0:
                    failed.append(sid)
                    continue
                if sid in self.mounted_segment_ids:
                    self.mounted_segment_ids.remove(sid)
            if not self.mounted_segment_ids:
                self.current_mode = "prefill"
        if failed:
            return _err(500, "Unmount failed for one or more segments",
                        failed_segment_ids=failed)
        return _ok()

    def handle_reconfigure(self, data):
        mode = data.get("mode", "")
        mode = mode.lower() if isinstance(mode, str) else ""
        if mode == "decode":
            path, size = data.get("path"), data.get("size")
            offset = data.get("offset", 0)
            protocol = data.get("protocol", self.config.protocol)
            location = data.get("location", "")
            if not path or size is None:
                return _err(400, "Missing path or size for decode mode")
            with self._state_lock:
                previous = list(self.mounted_segment_ids)
                result = self.store.mount_segment(path, size, offset, protocol, location)
                if result["ret"] != 0:
                    if previous:  # make-before-break: keep serving from the old segments
                        return _err(500, f"Mount failed, ret={result['ret']}; keeping "
                                    "previous decode segments", mode=self.current_mode)
                    self.current_mode = "prefill"
                    self.mounted_segment_ids.clear()
                    self.last_mount_info.clear()
                    return _err(500, f"Mount failed, ret={result['ret']}; rolled back to "
                                "prefill", mode=self.current_mode)
                failed = [sid for sid in previous if self.store.unmount_segment([sid]) != 0]
                self.mounted_segment_ids = list(result["segment_ids"]) + failed
                self.current_mode = "decode"
                self.last_mount_info = {"path": path, "offset": offset, "size": size,
                                        "protocol": protocol, "location": location}
                return _ok(mode=self.current_mode, segment_ids=list(self.mounted_segment_ids))
        if mode == "prefill":
            with self._state_lock:
                if self.mounted_segment_ids:
                    ret = self.store.unmount_segment(self.mounted_segment_ids)
                    if ret != 0:
                        return _err(500, f"Unmount failed, ret={ret}")
                    self.mounted_segment_ids.clear()
                self.current_mode = "prefill"
                self.last_mount_info.clear()
            return _ok(mode=self.current_mode)
        return _err(400, "Invalid mode. Use 'decode' or 'prefill'")

    def handle_unmount_local_disk(self, data):
        grace = data.get("grace_period_seconds", 0)
        if type(grace) is not int or not 0 <= grace <= _MAX_UNMOUNT_LOCAL_DISK_GRACE_PERIOD_SECONDS:
            return _err(400, "Invalid grace_period_seconds, must be a non-negative integer no "
                        f"greater than {_MAX_UNMOUNT_LOCAL_DISK_GRACE_PERIOD_SECONDS}")
        ret = self.store.unmount_local_disk_segment(grace)
        if ret != 0:
            return _err(500, f"Unmount local disk failed, ret={ret}")
        return _ok()


def _check_key(key):
    if not key or len(key.encode("utf-8", "surrogatepass")) > MAX_KEY or "\0" in key:
        raise _BadRequest(400, f"Invalid key: 1..{MAX_KEY} bytes without NUL")


def _segment_ids(data):
    ids = data.get("segment_ids", [])
    if isinstance(ids, str):
        ids = [ids]
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise _BadRequest(400, "segment_ids must be a string or a list of strings")
    return ids


# (method, first path part after /api/) -> (handler name, takes a key, takes a JSON body)
_ROUTES = {
    ("POST", "reconfigure"): ("handle_reconfigure", False, True),
    ("POST", "mount_shm"): ("handle_mount_shm", False, True),
    ("POST", "unmount_shm"): ("handle_unmount_shm", False, True),
    ("POST", "mount"): ("handle_mount", False, True),
    ("POST", "unmount"): ("handle_unmount", False, True),
    ("POST", "unmount_local_disk"): ("handle_unmount_local_disk", False, True),
    ("PUT", "put"): ("handle_put", False, True),
    ("GET", "get"): ("handle_get", True, False),
    ("GET", "exist"): ("handle_exist", True, False),
    ("DELETE", "remove"): ("handle_remove", True, False),
    ("DELETE", "remove_all"): ("handle_remove_all", False, False),
}


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT_S
    server_version = "mc_store_rest_server"

    def log_message(self, fmt, *args):
        log.debug("%s %s", self.address_string(), fmt % args)

    def _send(self, status, payload, headers=()):
        if isinstance(payload, (bytes, bytearray)):
            body, ctype = bytes(payload), "application/octet-stream"
        else:
            body, ctype = json.dumps(payload).encode(), "application/json"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def _route(self):
        path = urllib.parse.urlsplit(self.path).path
        if not path.startswith("/api/"):
            return None, None, None
        name, _, rest = path[len("/api/"):].partition("/")
        allowed = [m for (m, n) in _ROUTES if n == name]
        if not allowed:
            return None, None, None
        route = _ROUTES.get((self.command, name))
        if route is None:
            return "405", allowed, None
        handler, wants_key, _ = route
        if wants_key != bool(rest):
            return None, None, None
        return route, allowed, rest if wants_key else None

    def _dispatch(self):
        reserved = [0]  # bytes of self.server.budget this request holds; released when it ends
        try:
            return self._handle(reserved)
        finally:
            self.server.budget.release(reserved[0])

    def _handle(self, reserved):
        service, auth, budget = self.server.service, self.server.auth, self.server.budget
        start = time.perf_counter()
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            return self._send(400, {"error": "a body needs a valid Content-Length"})
        if length > min(MAX_BODY, budget.limit):
            self.close_connection = True
            return self._send(413, {"error": f"body larger than "
                                             f"{min(MAX_BODY, budget.limit)} bytes"})
        authz = self.headers.get("Authorization")
        if auth.enabled and length:
            # refuse an anonymous upload before reading it (headers-only pre-check)
            verdict, _, challenge = auth.check(authz, self.command, self.path)
            if verdict != HTTP_AUTH_OK:
                self.close_connection = True
                return self._refuse(verdict, challenge)
        if length:
            if not budget.reserve(length):
                # the unread body would be taken for the next request: the connection closes
                self.close_connection = True
                return self._send(503, {"error": f"server busy: request bodies in flight "
                                                 f"would exceed the {budget.limit}-byte budget; "
                                                 f"retry later"},
                                  [("Retry-After", str(BUDGET_RETRY_AFTER_S))])
            reserved[0] = length
            body = self.rfile.read(length)
            if len(body) != length:  # the client went away mid-body: nothing to answer
                self.close_connection = True
                return None
        else:
            body = b""
        if auth.enabled:
            verdict, peer, challenge = auth.check(authz, self.command, self.path, body)
            if verdict != HTTP_AUTH_OK:
                return self._refuse(verdict, challenge)
            if not peer["admin"]:
                return self._send(403, {"error": "a cluster token is required"})
        route, allowed, key = self._route()
        if route is None:
            return self._send(404, {"error": "Not Found"})
        if route == "405":
            return self._send(405, {"error": "Method Not Allowed"},
                              [("Allow", ", ".join(allowed))])
        handler, wants_key, wants_body = route
        try:
            if wants_body:
                try:
                    data = json.loads(body)
                except ValueError as e:
                    raise _BadRequest(400 if handler == "handle_unmount_local_disk" else 500,
                                      "Malformed JSON body" if handler ==
                                      "handle_unmount_local_disk" else str(e)) from None
                if not isinstance(data, dict):
                    raise _BadRequest(400 if handler == "handle_unmount_local_disk" else 500,
                                      "Request body must be a JSON object")
                status, payload = getattr(service, handler)(data)
            elif wants_key:
                try:
                    key = urllib.parse.unquote(key, errors="strict")
                except UnicodeError:
                    raise _BadRequest(400, "key is not UTF-8") from None
                status, payload = getattr(service, handler)(key)
            else:
                status, payload = getattr(service, handler)()
        except _BadRequest as e:
            status, payload = e.status, {"error": str(e)}
        except (TypeError, ValueError, KeyError, OverflowError, UnicodeError) as e:
            log.error("%s error: %s", handler, e)  # upstream answers exceptions with 500
            status, payload = 500, {"error": str(e)}
        log.info("%s operation completed in %.2f ms", handler[len("handle_"):].upper(),
                 (time.perf_counter() - start) * 1000)
        return self._send(status, payload)

    def _refuse(self, verdict, challenge):
        if verdict == HTTP_AUTH_BUSY:
            return self._send(503, {"error": http_auth_reason(verdict)})
        return self._send(401, {"error": http_auth_reason(verdict)},
                          [("WWW-Authenticate", challenge)])

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _dispatch


class _BodyBudget:
    """Bytes of request bodies the server buffers at once: a request reserves its declared
    Content-Length before reading the body and releases it when it has been answered (or has
    failed, or its client has gone)."""

    def __init__(self, limit):
        self.limit = limit
        self.used = 0
        self._mu = threading.Lock()

    def reserve(self, n):
        with self._mu:
            if self.used + n > self.limit:
                return False
            self.used += n
            return True

    def release(self, n):
        if n:
            with self._mu:
                self.used -= n


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # listen backlog; the connection cap applies after accept

    def __init__(self, addr, service, auth, body_budget=DEFAULT_BODY_BUDGET):
        self.service, self.auth = service, auth
        self.budget = _BodyBudget(body_budget)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(addr, _Handler)

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # over the connection cap: closed at accept
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def start_http_service(service, port=8080, host="0.0.0.0", auth=None,
                       body_budget=DEFAULT_BODY_BUDGET):
    """The REST server on host:port, serving in a thread; returns the server (.server_address
    tells the port, .shutdown() stops it)."""
    srv = _Server((host, port), service, auth or HttpAuthServer(None), body_budget)
    threading.Thread(target=srv.serve_forever, name="mc-store-rest", daemon=True).start()
    log.info("REST API started on %s:%d", *srv.server_address[:2])
    return srv


def parse_arguments(argv=None):
    p = argparse.ArgumentParser(description="Mooncake Store Service with REST API")
    p.add_argument("--config", type=str, help="Path to Mooncake config file", required=False)
    p.add_argument("-D", "--define", action="append", default=[],
                   help="Override configuration with key=value pairs "
                        "(e.g., -Dlocal_hostname=example.com)")
    p.add_argument("--port", type=int, default=8080, help="HTTP API port (default: 8080)")
    p.add_argument("--max-wait-time", type=float, default=60,
                   help="Maximum total wait time in seconds (default: 60)")
    p.add_argument("--host", type=str, default="0.0.0.0",
                   help="Address the HTTP API binds (default: 0.0.0.0)")
    p.add_argument("--max-body-budget", type=str, default="1GB",
                   help="Bytes of request bodies buffered at once, all connections together "
                        "(default: 1GB; a request that does not fit gets 503)")
    return p.parse_args(argv)


def main(argv=None):
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s - %(name)s - %(levelname)s - %(message)s")
    args = parse_arguments(argv)
    if not 0 <= args.port <= 65535:
        log.error("--port must be 0..65535")
        return 2
    try:
        body_budget = _parse_segment_size(args.max_body_budget)
    except ValueError:
        body_budget = 0
    if body_budget <= 0:
        log.error("--max-body-budget must be a positive size (e.g. 1GB, 64MB, 1048576)")
        return 2
    cli_config = {}
    for item in args.define:
        if "=" in item:
            k, v = item.split("=", 1)
            cli_config[k] = v
        else:
            log.warning("Ignoring invalid CLI config: %s", item)
    token_file = _config.te_tuning_from_env().get("auth_token_file")
    try:
        auth = HttpAuthServer(token_file)
    except ValueError as e:
        log.error("MC_AUTH_TOKEN_FILE: %s", e)
        return 1
    try:
        service = MooncakeStoreService(args.config, cli_config)
    except (OSError, ValueError) as e:
        log.error("Configuration load failed: %s", e)
        return 1
    shutdown = threading.Event()

    def request_shutdown(signum, _frame):
        log.info("Received signal %s, shutting down", signum)
        shutdown.set()
    signal.signal(signal.SIGINT, request_shutdown)
    signal.signal(signal.SIGTERM, request_shutdown)
    srv = None
    try:
        if not service.start_store_service(args.max_wait_time, shutdown):
            return 0 if shutdown.is_set() else 1
        if not auth.enabled and args.host not in ("127.0.0.1", "::1", "localhost"):
            log.warning("REST API on %s without MC_AUTH_TOKEN_FILE: anyone who can reach it "
                        "can read, write and remove keys", args.host)
        try:
            srv = start_http_service(service, args.port, args.host, auth, body_budget)
        except OSError as e:
            log.error("Failed to start HTTP service on %s:%d: %s", args.host, args.port, e)
            return 1
        print(f"mc_store_rest_server listening host={srv.server_address[0]} "
              f"port={srv.server_address[1]}", flush=True)
        log.info("Mooncake Store Service is running")
        while not shutdown.wait(1.0):
            pass
        return 0
    finally:
        if srv is not None:
            srv.shutdown()
            srv.server_close()
        service.stop()


def sync_main():
    """Entry point of the ``mc_store_rest_server`` console script."""
    return main()


if __name__ == "__main__":
    sys.exit(main())
