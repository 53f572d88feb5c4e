"""The cluster's HTTP challenge-response (docs/security.md, "HTTP ports") for HTTP servers
written in Python (mooncake.mooncake_store_service), and the client half for Python callers.

The protocol is the one of src/common/http_auth.c (libmooncake keeps it internal, so Python has
its own copy; interoperability with the C client is tested through mooncake_auth_curl):

* 401 with ``WWW-Authenticate: Mooncake nonce="<96 hex>"[, stale=true]``; the nonce is
  8 B issue time (monotonic ms, big endian) | 8 B random | HMAC-SHA256 of both under a key made
  once per server, valid NONCE_TTL_MS in that server only;
* ``Authorization: Mooncake nonce="..", cnonce="<32 hex>", mac="<64 hex>"`` with
  mac = HMAC-SHA256(secret, "MCHTTP1" NUL METHOD "\\n" TARGET "\\n" nonce "\\n" cnonce "\\n"
  hex(SHA-256(body)));
* a (nonce, cnonce) pair is accepted once (at most REPLAY_MAX live pairs; when full, requests
  are refused as busy rather than a live pair forgotten).

Token files (MC_AUTH_TOKEN_FILE) are read as src/common/auth.c reads them: one
``<secret> [tenant=<id>]`` a line, '#' comments, secrets of 16..256 printable bytes, at most 64
keys, tenant ids of at most 64 bytes, a file readable by others refused.
"""
import collections
import hashlib
import hmac
import os
import re
import secrets
import stat
import threading
import time

SCHEME = "Mooncake"
LABEL = b"MCHTTP1\0"
NONCE_LABEL = b"MCHTTP1-N\0"
NONCE_SIZE = 48
CNONCE_SIZE = 16
NONCE_TTL_MS = 60000
REPLAY_MAX = 65536
HEADER_MAX = 512
TARGET_MAX = 8192
METHOD_MAX = 16
SECRET_MIN, SECRET_MAX = 16, 256
MAX_KEYS = 64
TENANT_MAX = 64

OK, MISSING, MALFORMED, STALE, BAD_NONCE, BAD_MAC, REPLAY, BUSY = range(8)
REASONS = {OK: "ok", MISSING: "credentials required",
           MALFORMED: "malformed Authorization header", STALE: "stale nonce",
           BAD_NONCE: "unknown nonce", BAD_MAC: "bad credentials", REPLAY: "replayed request",
           BUSY: "too many recent requests"}


class TokenFileError(ValueError):
    """The token file cannot be used (message names the file and line)."""


def load_token_file(path):
    """[(secret bytes, tenant str)] of a token file ("" tenant = cluster token)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise TokenFileError(f"cannot open token file {path}: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        if mode & stat.S_IROTH:
            raise TokenFileError(f"token file {path} is readable by others (mode "
                                 f"{mode & 0o777:03o}); chmod 600 it")
        data = f.read(1 << 20)
    keys = []
    for lineno, raw in enumerate(data.split(b"\n"), 1):
        line = raw.split(b"#", 1)[0]
        toks = line.split()
        if not toks:
            continue
        secret, tenant = toks[0], None
        for t in toks[1:]:
            if t.startswith(b"tenant=") and len(t) > 7 and tenant is None:
                tenant = t[7:]
            else:
                raise TokenFileError(f"{path}:{lineno}: unexpected {t!r} (a line is: "
                                     "<secret> [tenant=<id>])")
        if any(c < 0x21 or c > 0x7E for c in secret):
            raise TokenFileError(f"{path}:{lineno}: secret has a non-printable byte")
        if not SECRET_MIN <= len(secret) <= SECRET_MAX:
            raise TokenFileError(f"{path}:{lineno}: a secret must be {SECRET_MIN}..{SECRET_MAX} "
                                 f"bytes (got {len(secret)})")
        if tenant is not None and len(tenant) > TENANT_MAX:
            raise TokenFileError(f"{path}:{lineno}: tenant id longer than {TENANT_MAX} bytes")
        if len(keys) >= MAX_KEYS:
            raise TokenFileError(f"{path}: more than {MAX_KEYS} keys")
        keys.append((bytes(secret), (tenant or b"").decode("ascii", "replace")))
    if not keys:
        raise TokenFileError(f"token file {path} holds no secret")
    return keys


_PARAM = re.compile(r'[ \t,]*([A-Za-z0-9_-]+)[ \t]*=[ \t]*(?:"([^"\\\x00-\x1f\x7f]*)"'
                    r'|([^\s,"\x00-\x20\x7f]*))[ \t]*(?=,|$)')


def parse_header(value):
    """{nonce, cnonce, mac, stale} of a "Mooncake k=v, ..." value, or None when malformed
    (the rules of mc_http_auth_parse)."""
    if not isinstance(value, str) or len(value) >= HEADER_MAX:
        return None
    s = value.lstrip(" \t")
    if s[:len(SCHEME)].lower() != SCHEME.lower() or (len(s) > len(SCHEME)
                                                     and s[len(SCHEME)] not in " \t"):
        return None
    s = s[len(SCHEME):]
    out, pos = {}, 0
    while True:
        while pos < len(s) and s[pos] in " \t,":
            pos += 1
        if pos == len(s):
            return out
        m = _PARAM.match(s, pos)
        if not m:
            return None
        name = m.group(1).lower()
        if name in ("nonce", "cnonce", "mac", "stale"):
            if name in out:
                return None
            out[name] = m.group(2) if m.group(2) is not None else m.group(3)
        pos = m.end()


def _unhex(v, n):
    if not isinstance(v, str) or len(v) != 2 * n:
        return None
    try:
        return bytes.fromhex(v)
    except ValueError:
        return None


def _request_msg(method, target, nonce, cnonce, body_hash):
    return (f"{method}\n{target}\n{nonce.hex()}\n{cnonce.hex()}\n{body_hash.hex()}"
            ).encode("latin-1")


def _now_ms():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000000


class Server:
    """Checks requests against the keys of a token file (keys None: every request passes, as
    an admin). Thread-safe."""

    def __init__(self, keys):
        self.keys = keys
        self._nonce_key = secrets.token_bytes(32).hex().encode()
        self._mu = threading.Lock()
        self._replay = collections.OrderedDict()  # pair key -> expiry (ms), oldest first

    @property
    def enabled(self):
        return self.keys is not None

    def challenge(self, stale=False, now_ms=None):
        now = _now_ms() if now_ms is None else now_ms
        head = now.to_bytes(8, "big") + secrets.token_bytes(8)
        nonce = head + hmac.new(self._nonce_key, NONCE_LABEL + head, hashlib.sha256).digest()
        return f'{SCHEME} nonce="{nonce.hex()}"' + (", stale=true" if stale else "")

    def check(self, authz, method, target, body, now_ms=None):
        """(verdict, peer): peer = {"admin": bool, "tenant": str} when verdict is OK. body None:
        a headers-only pre-check (header and nonce), so an anonymous upload can be refused
        before it is read; its OK carries no peer."""
        if self.keys is None:
            return OK, {"admin": True, "tenant": ""}
        now = _now_ms() if now_ms is None else now_ms
        if not authz:
            return MISSING, None
        p = parse_header(authz)
        nonce = cnonce = mac = None
        if p is not None:
            nonce = _unhex(p.get("nonce"), NONCE_SIZE)
            cnonce = _unhex(p.get("cnonce"), CNONCE_SIZE)
            mac = _unhex(p.get("mac"), 32)
        if nonce is None or cnonce is None or mac is None:
            return MALFORMED, None
        want = hmac.new(self._nonce_key, NONCE_LABEL + nonce[:16], hashlib.sha256).digest()
        if not hmac.compare_digest(want, nonce[16:]):
            return BAD_NONCE, None
        issued = int.from_bytes(nonce[:8], "big")
        if issued > now or now - issued >= NONCE_TTL_MS:
            return STALE, None
        if body is None:  # headers-only pre-check: nothing verified further, nothing recorded
            return OK, None
        if len(method) > METHOD_MAX or len(target) > TARGET_MAX:
            return MALFORMED, None
        msg = LABEL + _request_msg(method, target, nonce, cnonce, hashlib.sha256(body).digest())
        peer = None
        for secret, tenant in self.keys:  # every key is tried: constant work per request
            ok = hmac.compare_digest(hmac.new(secret, msg, hashlib.sha256).digest(), mac)
            if ok and peer is None:
                peer = {"admin": tenant == "", "tenant": tenant}
        if peer is None:
            return BAD_MAC, None
        pair = hashlib.sha256(nonce + cnonce).digest()[:16]
        with self._mu:
            while self._replay:
                k, exp = next(iter(self._replay.items()))
                if exp > now:
                    break
                del self._replay[k]
            if pair in self._replay:
                return REPLAY, None
            if len(self._replay) >= REPLAY_MAX:
                return BUSY, None
            self._replay[pair] = issued + NONCE_TTL_MS
        return OK, peer


def authorize(secret, nonce_hex, method, target, body=b""):
    """Authorization value signing one request with secret (bytes) over a server's nonce."""
    nonce = _unhex(nonce_hex, NONCE_SIZE)
    if nonce is None:
        raise ValueError("nonce must be 96 hex characters")
    cnonce = secrets.token_bytes(CNONCE_SIZE)
    msg = LABEL + _request_msg(method, target, nonce, cnonce, hashlib.sha256(body).digest())
    mac = hmac.new(secret, msg, hashlib.sha256).digest()
    return f'{SCHEME} nonce="{nonce.hex()}", cnonce="{cnonce.hex()}", mac="{mac.hex()}"'
