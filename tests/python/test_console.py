"""The operator console in a real browser (headless Debian chromium through selenium).

A master with its admin port, one storage server, and the page at /console: it loads without
browser console errors, lists the segment the storage server just mounted, shows the object
count change after puts, and survives a master restart (shows it reconnecting, then the new
master's figures). A screenshot goes to <build>/console.png (or $MC_CONSOLE_SCREENSHOT).
With a token file: the page is refused without credentials, a signed /console/login_link gives
a one-time code that sets a session cookie, and the page then loads.
"""
import os
import shutil
import socket
import stat
import subprocess
import time

import pytest

from conftest import Proc, bin_path, start_storage, wait_for

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402

CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
WAIT = 30.0  # generous: the machine may be loaded


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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

        from mooncake.store import MooncakeDistributedStore
        st = MooncakeDistributedStore()
        assert st.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", m.addr) == 0
        for i in range(5):
            assert st.put(f"console-key-{i}", os.urandom(4096)) == 0
        wait_for(lambda: text(browser, "#card-objects .v") == "5", WAIT, 0.1, "5 objects")
        # the event stream shows the commits
        wait_for(lambda: "console-key-4" in text(browser, "#events tbody"), WAIT, 0.1,
                 "the commit events")
        errs = severe(browser)
        assert not errs, errs
        shot = os.environ.get("MC_CONSOLE_SCREENSHOT") or os.path.join(
            os.environ["MC_BIN_DIR"], "..", "console.png")
        assert browser.save_screenshot(shot), shot

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
