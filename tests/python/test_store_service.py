"""mc_store_rest_server (mooncake.mooncake_store_service) started as a program on a free
loopback port against a live master and storage server: every endpoint of upstream's REST API,
bad input, the input caps, and the cluster token (MC_AUTH_TOKEN_FILE)."""
import http.client
import json
import os
import select
import subprocess
import sys
import tempfile
import time
import urllib.parse

import pytest

from conftest import LineReader, Proc, bin_path, start_master, start_storage, wait_for
from mooncake._core import http_auth_authorize, http_auth_parse

SECRET = b"rest-server-test-secret-0123456789"


class RestServer:
    def __init__(self, master_addr, env_extra=None, extra_args=()):
        self.log = tempfile.TemporaryFile()
        env = dict(os.environ, MOONCAKE_MASTER=master_addr, PYTHONUNBUFFERED="1",
                   **(env_extra or {}))
        env.pop("MOONCAKE_CONFIG_PATH", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mooncake.mooncake_store_service", "--host", "127.0.0.1",
             "--port", "0", "--max-wait-time", "10", "-Dlocal_hostname=127.0.0.1",
             "-Dglobal_segment_size=16MB", "-Dlocal_buffer_size=16MB", *extra_args],
            stdout=subprocess.PIPE, stderr=self.log, text=True, env=env)
        line = LineReader(self.proc.stdout).wait_for(
            lambda ln: ln.startswith("mc_store_rest_server listening"), 30)
        assert line is not None, f"no listening line: {self.stderr()}"
        assert line, f"exited rc={self.proc.poll()}: {self.stderr()}"
        self.port = int(line.split("port=")[1])

    def stderr(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-3000:]

    def request(self, method, path, body=None, headers=None, secret=None):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
        try:
            hdrs = dict(headers or {})
            if secret is not None:  # learn a nonce, then sign
                c.request(method, path, body=b"", headers={"Content-Length": "0"})
                r = c.getresponse()
                r.read()
                assert r.status == 401
                nonce = http_auth_parse(r.getheader("WWW-Authenticate"))["nonce"]
                hdrs["Authorization"] = http_auth_authorize(secret, nonce, method, path,
                                                            body or b"")
            c.request(method, path, body=body, headers=hdrs)
            r = c.getresponse()
            data = r.read()
            ctype = r.getheader("Content-Type", "")
            return r.status, (json.loads(data) if "json" in ctype else data), r
        finally:
            c.close()

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, 15)
            self.proc.wait(timeout=20)
        rc = self.proc.returncode
        self.proc.stdout.close()
        return rc


@pytest.fixture(scope="module")
def cluster():
    m = start_master()
    s = start_storage(m.addr)
    yield m, s
    s.stop()
    m.stop()


@pytest.fixture(scope="module")
def rest(cluster):
    srv = RestServer(cluster[0].addr)
    yield srv
    assert srv.stop() == 0, srv.stderr()


def q(key):
    return urllib.parse.quote(key, safe="")


def test_put_get_exist_remove(rest):
    assert rest.request("PUT", "/api/put", {"key": "k/1 ü", "value": "héllo"})[:2] == \
        (200, {"status": "success"})
    st, body, r = rest.request("GET", "/api/get/" + q("k/1 ü"))
    assert (st, body) == (200, "héllo".encode())
    assert r.getheader("Content-Type") == "application/octet-stream"
    assert rest.request("GET", "/api/exist/" + q("k/1 ü"))[:2] == (200, {"exists": True})
    # the get's read lease (1 s on the test master) holds the object: remove waits it out
    wait_for(lambda: rest.request("DELETE", "/api/remove/" + q("k/1 ü"))[:2] ==
             (200, {"status": "success"}), timeout=10, interval=0.1, what="remove")
    assert rest.request("GET", "/api/exist/" + q("k/1 ü"))[:2] == (200, {"exists": False})
    assert rest.request("GET", "/api/get/" + q("k/1 ü"))[:2] == (404, {"error": "Key not found"})
    assert rest.request("DELETE", "/api/remove/" + q("k/1 ü"))[:2] == \
        (500, {"error": "Remove operation failed"})


def test_remove_all(rest):
    for i in range(3):
        assert rest.request("PUT", "/api/put", {"key": f"ra{i}", "value": "v"})[0] == 200
    st, body, _ = rest.request("DELETE", "/api/remove_all")
    assert st == 200 and body["status"].startswith("success removed ")
    assert int(body["status"].split()[2]) >= 3
    assert rest.request("GET", "/api/exist/ra0")[1] == {"exists": False}


def test_put_bad_input(rest):
    assert rest.request("PUT", "/api/put", {"key": "a"})[:2] == \
        (400, {"error": "Missing key or value"})
    assert rest.request("PUT", "/api/put", {"value": "a"})[0] == 400
    assert rest.request("PUT", "/api/put", {"key": 5, "value": "a"})[0] == 400
    assert rest.request("PUT", "/api/put", {"key": "x" * 4097, "value": "a"})[0] == 400
    assert rest.request("GET", "/api/get/" + "x" * 4097)[0] == 400
    # not JSON / not an object: the parser's message with 500, as upstream
    st, body, _ = rest.request("PUT", "/api/put", b"{not json")
    assert st == 500 and body["error"]
    assert rest.request("PUT", "/api/put", [1, 2])[0] == 500
    # over the body cap: refused from the headers alone
    c = http.client.HTTPConnection("127.0.0.1", rest.port, timeout=20)
    c.putrequest("PUT", "/api/put")
    c.putheader("Content-Length", str(100 * 1024 * 1024 + 1))
    c.endheaders()
    r = c.getresponse()
    assert r.status == 413 and "larger" in json.loads(r.read())["error"]
    c.close()
    # routing
    assert rest.request("GET", "/api/nothing")[0] == 404
    assert rest.request("GET", "/api/put")[0] == 405
    assert rest.request("GET", "/api/get/")[0] == 404
    assert rest.request("GET", "/api/get/%ff")[0] == 400
    # still serving
    assert rest.request("PUT", "/api/put", {"key": "alive", "value": "1"})[0] == 200


def test_mount_unmount(rest):
    assert rest.request("POST", "/api/mount", {"size": 0})[:2] == \
        (400, {"error": "Invalid size, must be a positive integer"})
    assert rest.request("POST", "/api/mount", {"size": "4MB"})[0] == 400
    st, body, _ = rest.request("POST", "/api/mount", {"size": 1 << 20})
    assert st == 200 and body["status"] == "success", body
    assert body["allocated_size"] == 4 << 20 and len(body["segment_ids"]) == 1
    assert rest.request("POST", "/api/unmount", {})[:2] == (400, {"error": "Missing segment_ids"})
    assert rest.request("POST", "/api/unmount", {"segment_ids": 7})[0] == 400
    assert rest.request("POST", "/api/unmount", {"segment_ids": body["segment_ids"][0]})[:2] \
        == (200, {"status": "success"})
    st, b2, _ = rest.request("POST", "/api/unmount", {"segment_ids": body["segment_ids"]})
    assert st == 500 and "ret=-1" in b2["error"]


@pytest.fixture
def shm_file():
    name = f"mc_rest_test_{os.getpid()}"
    path = f"/dev/shm/{name}"
    with open(path, "wb") as f:
        f.truncate(8 << 20)
    yield name, path
    os.unlink(path)


def test_mount_shm_and_reconfigure(rest, shm_file):
    name, path = shm_file
    assert rest.request("POST", "/api/mount_shm", {"name": "../etc", "size": 4096})[:2] == \
        (400, {"error": "Missing or invalid name or size"})
    assert rest.request("POST", "/api/mount_shm", {"name": name})[0] == 400
    st, body, _ = rest.request("POST", "/api/mount_shm",
                               {"name": "/" + name, "size": 4 << 20, "offset": 0})
    assert st == 200 and len(body["segment_ids"]) == 1, body
    assert rest.request("POST", "/api/unmount_shm", {"segment_ids": body["segment_ids"]})[:2] \
        == (200, {"status": "success"})
    st, body, _ = rest.request("POST", "/api/unmount_shm", {"segment_ids": body["segment_ids"]})
    assert st == 500 and len(body["failed_segment_ids"]) == 1
    # reconfigure: decode mounts, a second decode remounts make-before-break, prefill unmounts
    assert rest.request("POST", "/api/reconfigure", {"mode": "sideways"})[0] == 400
    assert rest.request("POST", "/api/reconfigure", {"mode": "decode", "path": path})[:2] == \
        (400, {"error": "Missing path or size for decode mode"})
    st, d1, _ = rest.request("POST", "/api/reconfigure",
                             {"mode": "decode", "path": path, "size": 4 << 20})
    assert st == 200 and d1["mode"] == "decode" and len(d1["segment_ids"]) == 1, d1
    st, bad, _ = rest.request("POST", "/api/reconfigure",
                              {"mode": "decode", "path": "/dev/shm/no_such_file_here",
                               "size": 4 << 20})
    assert st == 500 and bad["mode"] == "decode" and "keeping previous" in bad["error"]
    st, d2, _ = rest.request("POST", "/api/reconfigure",
                             {"mode": "DECODE", "path": path, "size": 4 << 20,
                              "offset": 4 << 20})
    assert st == 200 and d2["segment_ids"] != d1["segment_ids"]
    assert rest.request("POST", "/api/reconfigure", {"mode": "prefill"})[:2] == \
        (200, {"status": "success", "mode": "prefill"})
    st, bad, _ = rest.request("POST", "/api/reconfigure",
                              {"mode": "decode", "path": "/dev/shm/no_such_file_here",
                               "size": 4 << 20})
    assert st == 500 and bad["mode"] == "prefill" and "rolled back" in bad["error"]


def test_unmount_local_disk(rest):
    assert rest.request("POST", "/api/unmount_local_disk", {})[:2] == \
        (200, {"status": "success"})
    assert rest.request("POST", "/api/unmount_local_disk", {"grace_period_seconds": 3601})[0] \
        == 400
    assert rest.request("POST", "/api/unmount_local_disk", {"grace_period_seconds": "1"})[0] \
        == 400
    assert rest.request("POST", "/api/unmount_local_disk", b"nope")[:2] == \
        (400, {"error": "Malformed JSON body"})
    assert rest.request("POST", "/api/unmount_local_disk", [])[:2] == \
        (400, {"error": "Request body must be a JSON object"})


def test_auth_token(cluster, tmp_path):
    token = tmp_path / "token"
    token.write_bytes(SECRET + b"\n" + b"tenant-secret-0123456789 tenant=t1\n")
    os.chmod(token, 0o600)
    # a client with a token refuses servers that cannot prove it: a cluster of its own
    m = start_master(extra=(f"--auth_token_file={token}",))
    env = dict(os.environ, MC_AUTH_TOKEN_FILE=str(token))
    s = Proc([bin_path("mooncake_client"), "--local_hostname=127.0.0.1",
              "--metadata_server=P2PHANDSHAKE", f"--master_server_address={m.addr}",
              "--global_segment_size=16MB", "--protocol=tcp", "--log_level=warn"],
             "mooncake_client ready", env=env)
    srv = RestServer(m.addr, env_extra={"MC_AUTH_TOKEN_FILE": str(token)})
    try:
        st, body, r = srv.request("GET", "/api/exist/x")
        assert st == 401 and body == {"error": "credentials required"}
        assert r.getheader("WWW-Authenticate").startswith('Mooncake nonce="')
        st, body, _ = srv.request("PUT", "/api/put", {"key": "sk", "value": "v"}, secret=SECRET)
        assert (st, body) == (200, {"status": "success"})
        assert srv.request("GET", "/api/get/sk", secret=SECRET)[:2] == (200, b"v")
        # wrong secret, tenant token, a signature for another request, a replay
        assert srv.request("GET", "/api/get/sk", secret=b"wrong-secret-0123456789")[:2] == \
            (401, {"error": "bad credentials"})
        assert srv.request("GET", "/api/get/sk", secret=b"tenant-secret-0123456789")[0] == 403
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=20)
        c.request("GET", "/api/get/sk")
        r = c.getresponse()
        r.read()
        nonce = http_auth_parse(r.getheader("WWW-Authenticate"))["nonce"]
        h = http_auth_authorize(SECRET, nonce, "GET", "/api/get/other")
        c.request("GET", "/api/get/sk", headers={"Authorization": h})
        r = c.getresponse()
        assert r.status == 401 and json.loads(r.read())["error"] == "bad credentials"
        h = http_auth_authorize(SECRET, nonce, "GET", "/api/get/sk")
        for want in (200, 401):
            c.request("GET", "/api/get/sk", headers={"Authorization": h})
            r = c.getresponse()
            r.read()
            assert r.status == want
        c.close()
        # an anonymous upload is refused from its headers
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=20)
        c.putrequest("PUT", "/api/put")
        c.putheader("Content-Length", str(50 << 20))
        c.endheaders()
        r = c.getresponse()
        assert r.status == 401
        c.close()
        # the C client (mooncake_auth_curl) signs requests the Python server accepts
        curl = bin_path("mooncake_auth_curl")
        r = subprocess.run([curl, f"--auth_token_file={token}",
                            f"http://127.0.0.1:{srv.port}/api/exist/sk"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and json.loads(r.stdout) == {"exists": True}, r.stderr
        r = subprocess.run([curl, f"--auth_token_file={token}", "-X", "PUT", "-d",
                            json.dumps({"key": "ck", "value": "cv"}),
                            f"http://127.0.0.1:{srv.port}/api/put"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        assert srv.request("GET", "/api/get/ck", secret=SECRET)[:2] == (200, b"cv")
    finally:
        rc = srv.stop()
        s.stop()
        m.stop()
        assert rc == 0, srv.stderr()


def test_http_auth_binding(tmp_path):
    """mooncake._core's HttpAuthServer is src/common/http_auth.c: verdicts, peers, replay."""
    from mooncake import _core
    open_srv = _core.HttpAuthServer(None)
    assert not open_srv.enabled
    assert open_srv.check(None, "GET", "/x", b"") == \
        (_core.HTTP_AUTH_OK, {"admin": True, "tenant": ""}, None)
    token = tmp_path / "token"
    token.write_bytes(SECRET + b"\ntenant-secret-0123456789 tenant=t1\n")
    os.chmod(token, 0o600)
    srv = _core.HttpAuthServer(str(token))
    assert srv.enabled
    verdict, peer, challenge = srv.check(None, "PUT", "/api/put", b"{}")
    assert (verdict, peer) == (_core.HTTP_AUTH_MISSING, None)
    assert _core.http_auth_reason(verdict) == "credentials required"
    nonce = http_auth_parse(challenge)["nonce"]
    assert len(nonce) == 96 and http_auth_parse("Basic abc") is None
    h = http_auth_authorize(SECRET, nonce, "PUT", "/api/put", b"{}")
    assert srv.check(h, "PUT", "/api/put") == (_core.HTTP_AUTH_OK, None, None)  # headers only
    assert srv.check(h, "PUT", "/api/put", b"{ }")[0] == _core.HTTP_AUTH_BAD_MAC
    assert srv.check(h, "PUT", "/api/put", b"{}")[:2] == \
        (_core.HTTP_AUTH_OK, {"admin": True, "tenant": ""})
    assert srv.check(h, "PUT", "/api/put", b"{}")[0] == _core.HTTP_AUTH_REPLAY
    h = http_auth_authorize(b"tenant-secret-0123456789", nonce, "GET", "/api/get/k")
    assert srv.check(h, "GET", "/api/get/k", b"")[1] == {"admin": False, "tenant": "t1"}
    other = _core.HttpAuthServer(str(token))  # a nonce of another server (process) is refused
    h = http_auth_authorize(SECRET, nonce, "GET", "/")
    assert other.check(h, "GET", "/", b"")[0] == _core.HTTP_AUTH_BAD_NONCE
    with pytest.raises(ValueError):
        http_auth_authorize(b"short", nonce, "GET", "/")
    with pytest.raises(ValueError):
        http_auth_authorize(SECRET, "00", "GET", "/")
    os.chmod(token, 0o644)
    with pytest.raises(ValueError, match="cannot be used"):
        _core.HttpAuthServer(str(token))


def test_bad_token_file_stops_the_program(cluster, tmp_path):
    token = tmp_path / "token"
    token.write_bytes(SECRET + b"\n")
    os.chmod(token, 0o644)
    env = dict(os.environ, MOONCAKE_MASTER=cluster[0].addr, MC_AUTH_TOKEN_FILE=str(token))
    r = subprocess.run([sys.executable, "-m", "mooncake.mooncake_store_service", "--host",
                        "127.0.0.1", "--port", "0"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and "readable by others" in r.stderr, r.stderr


def test_setup_failure_exits_after_max_wait(tmp_path):
    env = dict(os.environ, MOONCAKE_MASTER="127.0.0.1:1")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "mooncake.mooncake_store_service", "--host",
                        "127.0.0.1", "--port", "0", "--max-wait-time", "2",
                        "-Dlocal_hostname=127.0.0.1", "-Dglobal_segment_size=4MB",
                        "-Dlocal_buffer_size=4MB"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1, r.stderr
    assert "exceeded max wait time" in r.stderr
    assert time.monotonic() - t0 < 100


def test_config_file_and_env(tmp_path, monkeypatch):
    from mooncake.mooncake_config import MooncakeConfig
    from mooncake.mooncake_store_service import MooncakeStoreService
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"local_hostname": "h", "metadata_server": "P2PHANDSHAKE",
                             "master_server_address": "127.0.0.1:1", "protocol": "TCP",
                             "global_segment_size": "1gb", "tenant_id": "from-file"}))
    c = MooncakeConfig.from_file(str(p))
    assert (c.protocol, c.global_segment_size, c.local_buffer_size) == ("tcp", 1 << 30, 1 << 30)
    s = MooncakeStoreService(str(p), {"tenant_id": "from-cli", "enable_ssd_offload": "false",
                                      "local_buffer_size": "2MB"})
    assert (s.config.tenant_id, s.config.enable_ssd_offload, s.config.local_buffer_size) == \
        ("from-cli", False, 2 << 20)
    p.write_text(json.dumps({"local_hostname": "h"}))
    with pytest.raises(ValueError, match="metadata_server"):
        MooncakeConfig.from_file(str(p))
    monkeypatch.delenv("MOONCAKE_CONFIG_PATH", raising=False)
    monkeypatch.delenv("MOONCAKE_MASTER", raising=False)
    with pytest.raises(ValueError):
        MooncakeConfig.load_from_env()
    monkeypatch.setenv("MOONCAKE_MASTER", "m:1")
    c = MooncakeConfig.load_from_env()
    assert (c.local_hostname, c.metadata_server, c.global_segment_size) == \
        ("localhost", "P2PHANDSHAKE", 3355443200)


def test_connection_cap(rest):
    """More idle connections than the cap: the extra ones are closed, the server still
    answers once they go away."""
    import socket
    socks = [socket.create_connection(("127.0.0.1", rest.port)) for _ in range(70)]
    try:
        def closed_count():
            n = 0
            for s in socks:
                s.setblocking(False)
                try:
                    if s.recv(1) == b"":
                        n += 1
                except BlockingIOError:
                    pass
                except ConnectionResetError:
                    n += 1
            return n >= 6
        wait_for(closed_count, timeout=20, what="connections over the cap to be closed")
    finally:
        for s in socks:
            s.close()
    wait_for(lambda: rest.request("GET", "/api/exist/zz")[0] == 200, timeout=20,
             what="the server to answer again")


def _body_request(port, n, first=b""):
    """A socket that sent the headers of a POST with an n-byte body (and `first` of it)."""
    import socket
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    s.sendall(f"POST /api/unmount_local_disk HTTP/1.1\r\nHost: t\r\nContent-Length: {n}\r\n"
              f"\r\n".encode() + first)
    return s


def _response(sock):
    r = http.client.HTTPResponse(sock)
    r.begin()
    return r, json.loads(r.read())


def _try_body(port, n):
    """Status and response of an n-byte body: an answer before the body is sent (503, 413)
    is taken as it is; otherwise the body follows (the server is waiting for it)."""
    s = _body_request(port, n)
    try:
        if not select.select([s], [], [], 2)[0]:
            s.sendall(b" " * n)
        r, body = _response(s)
        return r.status, body, r
    finally:
        s.close()


def _holding_request(port, n):
    """A request whose headers reserved n bytes of the body budget and whose body stalls,
    confirmed by an n-byte probe answered 503. The server releases a finished request's
    reservation just after its answer, so a holder sent right after a probe may itself be
    refused (it then has an answer waiting): it is sent again."""
    holder = _body_request(port, n, b" " * 1000)

    def reserved():
        nonlocal holder
        if select.select([holder], [], [], 0)[0]:  # answered (refused): send it again
            holder.close()
            holder = _body_request(port, n, b" " * 1000)
            return False
        st, body, r = _try_body(port, n)
        if st == 400:
            return False  # the holder's headers were not read yet
        assert st == 503 and "budget" in body["error"], (st, body)
        assert r.getheader("Retry-After") == "1"
        return True
    wait_for(reserved, timeout=30, what="a body over the budget to be refused")
    return holder


def test_body_budget(cluster):
    """Bodies buffered at once are capped server-wide (--max-body-budget): a request that does
    not fit gets 503 + Retry-After before its body is read; the budget comes back when a
    request is answered or its client goes away; the server keeps serving."""
    srv = RestServer(cluster[0].addr, extra_args=("--max-body-budget", "3MB"))
    n = 2 << 20
    try:
        assert _try_body(srv.port, 4 << 20)[:2] == (413, {"error": "body larger than "
                                                           f"{3 << 20} bytes"})
        assert _try_body(srv.port, n)[0] == 400  # fits: read, then refused as not JSON
        holder = _holding_request(srv.port, n)
        assert srv.request("GET", "/api/exist/zz")[:2] == (200, {"exists": False})
        holder.sendall(b" " * (n - 1000))
        assert _response(holder)[0].status == 400
        holder.close()
        wait_for(lambda: _try_body(srv.port, n)[0] == 400, timeout=20,
                 what="the budget to be released after an answer")
        # a client that goes away mid-body releases its reservation too
        gone = _holding_request(srv.port, n)
        gone.close()
        wait_for(lambda: _try_body(srv.port, n)[0] == 400, timeout=20,
                 what="the budget to be released after a disconnect")
    finally:
        assert srv.stop() == 0, srv.stderr()


def test_body_budget_flag_checked(cluster):
    for bad in ("0", "-5", "lots"):
        r = subprocess.run([sys.executable, "-m", "mooncake.mooncake_store_service", "--host",
                            "127.0.0.1", "--port", "0", "--max-body-budget", bad],
                           env=dict(os.environ, MOONCAKE_MASTER=cluster[0].addr),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "--max-body-budget" in r.stderr, r.stderr
