"""The operator console in a real browser (headless Debian chromium through selenium).

A master with its admin port, one storage server, and the page at /console: it loads without
browser console errors, lists the segment the storage server just mounted (with the page size
of its memory), shows the object count change after puts and the leased-object count rise
after a get, and survives a master restart (shows it reconnecting, then the new master's
figures). A screenshot goes to <build>/console.png (or $MC_CONSOLE_SCREENSHOT); with
MC_CONSOLE_DOC_SCREENSHOT=1 also to docs/images/console.png.
With a token file: the page is refused without credentials, a signed /console/login_link gives
a one-time code that sets a session cookie, and the page then loads.
A storage server with --enable_offload shows as a disk-tier row. In an HA pair (a real etcd,
when installed), the standby's admin port serves the page too: role standby, the leader listed.
"""
import os
import shutil
import stat
import subprocess
import time
import urllib.request

import pytest

from conftest import Proc, bin_path, free_port, start_storage, wait_for

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402

CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
WAIT = 30.0  # generous: the machine may be loaded


def master(rpc_port, http_port, extra=()):
    m = Proc([bin_path("mooncake_master"), f"--port={rpc_port}", f"--metrics_port={http_port}",
              "--rpc_address=127.0.0.1", "--metrics_host=127.0.0.1", "--wal_dir=",
              "--client_ttl=3", "--log_level=warn", *extra], "mooncake_master listening")
    m.addr = f"127.0.0.1:{m.field('rpc_port')}"
    m.http = f"http://127.0.0.1:{m.field('metrics_port')}"
    return m


@pytest.fixture
def browser():
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    opts = Options()
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1400,1100", "--no-first-run", "--disable-extensions"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    yield d
    d.quit()


def severe(driver):
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def text(driver, css):
    try:
        return driver.find_element(By.CSS_SELECTOR, css).text
    except Exception:
        return ""


def test_console_live(browser):
    rpc, http = free_port(), free_port()
    m = master(rpc, http)
    s = None
    st = None
    try:
        s = start_storage(m.addr)
        browser.get(m.http + "/console")
        wait_for(lambda: text(browser, "#conn") == "live", WAIT, 0.1, "the page to go live")
        # the segment the storage server mounted is listed
        wait_for(lambda: s.segment in text(browser, "#segments tbody"), WAIT, 0.1,
                 f"segment {s.segment} in the table")
        wait_for(lambda: text(browser, "#card-objects .v") == "0", WAIT, 0.1, "0 objects")
        # the page size its memory is on, as the storage server reported it at mount
        wait_for(lambda: text(browser, "#segments tbody td:nth-child(5)").endswith("iB"), WAIT,
                 0.1, "the segment's page size")
        pages = text(browser, "#segments tbody td:nth-child(5)")
        assert pages in ("4.0 KiB", "huge 2.0 MiB", "huge 1.0 GiB"), pages

        from mooncake.store import MooncakeDistributedStore
        st = MooncakeDistributedStore()
        assert st.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", m.addr) == 0
        for i in range(5):
            assert st.put(f"console-key-{i}", os.urandom(4096)) == 0
        wait_for(lambda: text(browser, "#card-objects .v") == "5", WAIT, 0.1, "5 objects")
        # puts lease nothing; a get leases its object (for --default_kv_lease_ttl, 10 s)
        wait_for(lambda: text(browser, "#card-leased .v") == "0", WAIT, 0.1, "0 leased")
        assert len(st.get("console-key-2")) == 4096
        wait_for(lambda: text(browser, "#card-leased .v") == "1", WAIT, 0.1, "1 leased")
        # the event stream shows the commits
        wait_for(lambda: "console-key-4" in text(browser, "#events tbody"), WAIT, 0.1,
                 "the commit events")
        errs = severe(browser)
        assert not errs, errs
        shot = os.environ.get("MC_CONSOLE_SCREENSHOT") or os.path.join(
            os.environ["MC_BIN_DIR"], "..", "console.png")
        assert browser.save_screenshot(shot), shot
        if os.environ.get("MC_CONSOLE_DOC_SCREENSHOT") == "1":
            doc = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "images",
                               "console.png")
            assert browser.save_screenshot(doc), doc

        # master restart (same ports, no WAL): the page says so, then shows the new master
        st.close()
        st = None
        m.stop()
        wait_for(lambda: "reconnecting" in text(browser, "#conn"), WAIT, 0.1,
                 "the page to notice the master is gone")
        m = master(rpc, http)
        wait_for(lambda: text(browser, "#conn") == "live", WAIT, 0.1, "the page to reconnect")
        wait_for(lambda: text(browser, "#card-objects .v") == "0", WAIT, 0.1,
                 "the new master's object count")
        # only the refused connections of the outage may have been logged
        errs = [e for e in severe(browser)
                if not any(n in e["message"] for n in ("ERR_CONNECTION_REFUSED",
                                                        "ERR_EMPTY_RESPONSE",
                                                        "ERR_CONNECTION_RESET", " 503 "))]
        assert not errs, errs
    finally:
        if st is not None:
            st.close()
        if s is not None:
            s.stop()
        m.stop()


def test_console_login_with_token(browser, tmp_path):
    tok = tmp_path / "token"
    tok.write_text("console-test-secret-0123456789abcdef\n"
                   "console-tenant-secret-0123456789abc tenant=acme\n")
    os.chmod(tok, stat.S_IRUSR | stat.S_IWUSR)
    tenant_tok = tmp_path / "tenant_token"
    tenant_tok.write_text("console-tenant-secret-0123456789abc tenant=acme\n")
    os.chmod(tenant_tok, stat.S_IRUSR | stat.S_IWUSR)
    m = master(0, 0, [f"--auth_token_file={tok}"])
    try:
        browser.get(m.http + "/console")
        assert "credentials required" in browser.page_source  # the default stays closed
        browser.get(m.http + "/console/login?code=" + "0" * 64)
        assert "unknown, used or expired login code" in browser.page_source
        # a tenant token may not mint a login link (the admin port takes cluster tokens only)
        r = subprocess.run([bin_path("mooncake_auth_curl"), f"--auth_token_file={tenant_tok}",
                            m.http + "/console/login_link"], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 22 and "403" in r.stderr, (r.returncode, r.stdout, r.stderr)
        out = subprocess.run([bin_path("mooncake_auth_curl"), f"--auth_token_file={tok}",
                              m.http + "/console/login_link"], capture_output=True, text=True,
                             timeout=30, check=True).stdout
        import json
        path = json.loads(out)["path"]
        severe(browser)  # drains the refusals above (and the favicon of their error pages)
        browser.get(m.http + path)  # sets the cookie, redirects to /console
        wait_for(lambda: text(browser, "#conn") == "live", WAIT, 0.1, "the page to go live")
        wait_for(lambda: text(browser, "#card-objects .v") == "0", WAIT, 0.1, "the figures")
        errs = severe(browser)
        assert not errs, errs
        cookie = browser.get_cookie("mc_console")
        assert cookie and cookie["httpOnly"], cookie
        # the code was for one use
        browser.get(m.http + path)
        assert "unknown, used or expired login code" in browser.page_source
        # the cookie reads, but does not write (tenant quotas) nor mint links
        browser.get(m.http + "/console/login_link")
        assert "credentials required" in browser.page_source
    finally:
        m.stop()


def test_console_disk_tier(browser, tmp_path):
    """A storage server of the SSD tier: its disk is a row of the disk-tier table and its
    segment's disk-tier cell, once it mounted the disk."""
    m = master(0, 0, ["--enable_offload=true"])
    env = dict(os.environ, MC_OFFLOAD_HEARTBEAT_MS="50",
               MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES="8MB",
               MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES="64MB",
               MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES="1MB")
    srv = None
    try:
        srv = Proc([bin_path("mooncake_client"), "--local_hostname=127.0.0.1",
                    "--metadata_server=P2PHANDSHAKE", f"--master_server_address={m.addr}",
                    "--global_segment_size=16MB", "--protocol=tcp", "--log_level=warn",
                    "--enable_offload=true", f"--offload_path={tmp_path / 'disk'}"],
                   "mooncake_client ready", env=env)
        browser.get(m.http + "/console")
        wait_for(lambda: text(browser, "#conn") == "live", WAIT, 0.1, "the page to go live")
        wait_for(lambda: "yes" in text(browser, "#disks tbody"), WAIT, 0.1,
                 "the storage server's disk tier (offloading)")
        assert text(browser, "#disk-count") == "(1)"
        wait_for(lambda: "obj" in text(browser, "#segments tbody td:nth-child(11)"), WAIT, 0.1,
                 "the segment's disk-tier cell")
        assert "/" in text(browser, "#card-disk .v")
        errs = severe(browser)
        assert not errs, errs
    finally:
        if srv is not None:
            srv.stop()
        m.stop()


ETCD = os.environ.get("MC_ETCD_BIN", "/usr/bin/etcd")


def http_get(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.read().decode()
    except OSError:
        return ""


def test_console_on_standby(browser, tmp_path):
    """An HA pair: the standby's admin port serves the console, read-only, naming the
    leader."""
    if not os.access(ETCD, os.X_OK):
        pytest.skip(f"{ETCD} not installed (scripts/install-deps.sh: etcd-server)")
    cp, pp = free_port(), free_port()
    ep = f"127.0.0.1:{cp}"
    etcd = subprocess.Popen([ETCD, "--name", "e0", "--data-dir", str(tmp_path / "etcd"),
                             "--listen-client-urls", f"http://{ep}",
                             "--advertise-client-urls", f"http://{ep}",
                             "--listen-peer-urls", f"http://127.0.0.1:{pp}",
                             "--initial-advertise-peer-urls", f"http://127.0.0.1:{pp}",
                             "--initial-cluster", f"e0=http://127.0.0.1:{pp}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    leader = standby = None
    ha = ["--enable_ha=true", f"--etcd_endpoints={ep}", "--cluster_id=consoleha"]
    try:
        wait_for(lambda: http_get(f"http://{ep}/health") != "", 20, 0.1, "etcd")
        leader = master(free_port(), free_port(), [*ha, f"--wal_dir={tmp_path / 'wal0'}"])
        sport = free_port()
        standby = subprocess.Popen(
            [bin_path("mooncake_master"), *ha, "--rpc_address=127.0.0.1",
             f"--port={free_port()}", f"--metrics_port={sport}", "--metrics_host=127.0.0.1",
             f"--wal_dir={tmp_path / 'wal1'}", "--log_level=warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        surl = f"http://127.0.0.1:{sport}"
        wait_for(lambda: http_get(surl + "/role") == "standby", WAIT, 0.1, "the standby")
        browser.get(surl + "/console")
        wait_for(lambda: text(browser, "#conn") == "live", WAIT, 0.1, "the page to go live")
        wait_for(lambda: text(browser, "#role") == "standby", WAIT, 0.1, "role standby")
        wait_for(lambda: leader.addr in text(browser, "#masters tbody"), WAIT, 0.1,
                 "the leader in the masters table")
        assert "this page" in text(browser, "#masters tbody")
        assert "batches" in text(browser, "#masters tbody")  # its log lag
        assert leader.addr in text(browser, "#card-leader .v")
        errs = severe(browser)
        assert not errs, errs
    finally:
        if standby is not None:
            standby.kill()
            standby.wait(timeout=10)
        if leader is not None:
            leader.stop()
        etcd.kill()
        etcd.wait(timeout=10)
