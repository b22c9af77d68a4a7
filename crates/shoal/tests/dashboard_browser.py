#!/usr/bin/env python3
"""Drives the coordinator's dashboard in headless Chromium (Debian's
chromium and chromedriver, through selenium), for crates/shoal/tests/dashboard.rs.

It opens the page of a running cluster, waits until it lists the servers
(all up) and has drawn samples in its charts, SIGKILLs one server by its
PID, then waits until the page shows that server down, its recovery (in
progress or finished; a small one may finish between two polls), the
recovery finished, and the failure with its reason. Screenshots go to
--out (dashboard-before.png, dashboard-recovering.png if the recovery was
seen under way, dashboard.png at the end). Exits 0 only if the page showed
all of it; otherwise prints what it last saw and exits 1.
"""

import argparse
import json
import os
import signal
import sys
import time

os.environ.setdefault("SE_OFFLINE", "true")  # never let selenium fetch a driver

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402


def find_chromium():
    for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"):
        if os.path.exists(p):
            return p
    raise SystemExit("no chromium binary")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--servers", type=int, required=True)
    ap.add_argument("--victim-id", type=int, required=True)
    ap.add_argument("--victim-pid", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--chromedriver", default="/usr/bin/chromedriver")
    ap.add_argument("--timeout", type=float, default=90.0)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)

    opts = webdriver.ChromeOptions()
    opts.binary_location = find_chromium()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,2400", "--no-first-run", "--disable-extensions"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(a.chromedriver), options=opts)
    victim = a.victim_id
    seen = {"running": False, "suspect": False}

    def shot(name):
        path = os.path.join(a.out, name)
        driver.save_screenshot(path)
        print(f"screenshot: {path}", flush=True)

    def q(css):
        return driver.find_elements(By.CSS_SELECTOR, css)

    def state_of(server):
        rows = q(f'#servers tbody tr[data-server="{server}"]')
        return rows[0].get_attribute("data-state") if rows else None

    def wait(what, cond):
        deadline = time.monotonic() + a.timeout
        while time.monotonic() < deadline:
            # Note the phases as they go by (each lasts about a second or more).
            if q(f'#suspects .suspect[data-server="{victim}"]'):
                seen["suspect"] = True
            if q(f'#recoveries .recovery[data-dead="{victim}"][data-status="running"]'):
                if not seen["running"]:
                    seen["running"] = True
                    shot("dashboard-recovering.png")
            try:
                met = cond()
            except StaleElementReferenceException:
                # The page re-rendered the element between finding it and
                # reading it (it refreshes every second): look again.
                met = False
            if met:
                print(f"seen: {what}", flush=True)
                return
            time.sleep(0.2)
        shot("dashboard-failed.png")
        body = driver.find_element(By.TAG_NAME, "body").text
        raise AssertionError(f"the page did not show {what} within {a.timeout} s; it shows:\n{body}")

    try:
        driver.get(a.url)
        assert driver.title == "Shoal cluster", driver.title
        wait(f"{a.servers} servers up",
             lambda: len(q('#servers tbody tr[data-state="up"]')) == a.servers)
        wait("memory, log and throughput figures of every server",
             lambda: all(r.find_elements(By.CSS_SELECTOR, ".bar") for r in q('#servers tbody tr[data-state="up"]')))

        def charted():
            return all(int(c.get_attribute("data-points") or 0) >= 2 * a.servers
                       for c in q("canvas[data-chart]"))
        wait("samples of every server in every chart", charted)
        wait(f"tablets of server {victim}",
             lambda: q(f'#servers tbody tr[data-server="{victim}"] td')[3].text.split("\n")[0] not in ("", "0"))
        shot("dashboard-before.png")

        os.kill(a.victim_pid, signal.SIGKILL)
        print(f"killed server {victim} (pid {a.victim_pid})", flush=True)
        wait(f"server {victim} down", lambda: state_of(victim) == "down")
        wait(f"the recovery of server {victim}",
             lambda: seen["running"] or q(f'.recovery[data-dead="{victim}"]'))
        wait(f"the recovery of server {victim} finished",
             lambda: q(f'#finished .recovery[data-dead="{victim}"][data-status="finished"]')
             and not q(f'#recoveries .recovery[data-dead="{victim}"]'))
        wait(f"the failure of server {victim} with its reason",
             lambda: any("ping" in r.text for r in q(f'#failures tbody tr[data-server="{victim}"]')))
        wait(f"the other servers up, serving server {victim}'s tablets",
             lambda: len(q('#servers tbody tr[data-state="up"]')) == a.servers - 1)
        status = driver.find_element(By.ID, "status")
        assert status.get_attribute("data-ok") == "true", status.text
        # Let the charts take a few samples after the failure.
        time.sleep(2)
        shot("dashboard.png")
        finished = q(f'#finished .recovery[data-dead="{victim}"]')[0].text
        failure = q(f'#failures tbody tr[data-server="{victim}"]')[0].text
        print(json.dumps({"seen_suspect": seen["suspect"], "seen_running": seen["running"],
                          "finished": finished, "failure": failure}), flush=True)
    finally:
        driver.quit()


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"dashboard test failed: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
