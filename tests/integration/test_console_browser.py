"""The operator console in a real headless Chromium, over a running scheduler on the real broker.

Screenshots of every page go to $CONSOLE_SCREENSHOTS (default: the test's temporary directory;
docs/console/ holds a committed set made with CONSOLE_SCREENSHOTS=docs/console).
"""
from __future__ import annotations

import base64
import os
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from console_env import console_server
from control_env import control_env, hourly
from engine_harness import FakeWorker
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from helpers.waiting import wait_until
from scheduler.broker.local import free_port
from scheduler.console.sessions import COOKIE
from scheduler.control.client import make_spec

STRICT_AT_7, FLEXIBLE_AT_7 = 5, 3


@pytest.fixture(scope="module")
def metrics_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def env(kafka_bootstrap, tmp_path_factory, metrics_port):
    yield from control_env(kafka_bootstrap, tmp_path_factory.mktemp("console"), ("--metrics-port", str(metrics_port)))


@pytest.fixture(scope="module")
def server(env, metrics_port):
    client = env.plane.client
    for n in range(STRICT_AT_7):
        client.create("acme", make_spec("cron", "7 * * * *", "UTC"), schedule_id=f"at7-strict-{n}")
    for n in range(FLEXIBLE_AT_7):
        client.create("acme", make_spec("cron", "7 * * * *", "UTC", flexible_window_ms=300_000),
                      schedule_id=f"at7-flex-{n}")
    client.create("acme", hourly(), schedule_id="nightly-report")
    # Sundays of March at 02:30 in New York: one of them each year falls in the spring-forward gap.
    client.create("acme", make_spec("cron", "30 2 * 3 0", "America/New_York", dst_gap="SHIFT"),
                  schedule_id="dst-shifted")
    client.create("globex", hourly(), schedule_id="globex-only")
    yield from console_server(env, [f"http://127.0.0.1:{metrics_port}/metrics"])


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    target = Path(os.environ.get("CONSOLE_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    target.mkdir(parents=True, exist_ok=True)
    return target


def until(check: Callable[[], bool], timeout: float = 30.0, reload=None) -> bool:
    """`check` holds within `timeout` (the page reloaded between looks when `reload` is given)."""
    def looked() -> bool:
        if check():
            return True
        if reload is not None:
            reload()
        return False

    try:
        return wait_until(looked, timeout, interval=0.3)
    except AssertionError:
        return False


def login(browser, server, who: str) -> None:
    browser.delete_all_cookies()
    browser.get(f"{server.url}/ui/login")
    browser.find_element(By.ID, "key").send_keys(server.env.keys[who])
    click(browser, "login")
    assert until(lambda: browser.current_url.endswith("/ui/tenants")), browser.current_url


def go(browser, element) -> None:
    """Click something that loads a page, and wait until the new page has replaced the old one."""
    old = browser.find_element(By.TAG_NAME, "html")
    element.click()
    WebDriverWait(browser, 30).until(lambda _: replaced(old))


def replaced(old) -> bool:
    """Whether the old page is gone. Asked while its document is being torn down, chromedriver may answer
    with an 'unhandled inspector error' (DevTools: 'Cannot find context with specified id') instead of a
    stale element: the context it cannot find is the old document's, so that is gone too."""
    try:
        old.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as error:
        if "unhandled inspector error" in str(error):
            return True
        raise
    return False


def click(browser, element_id: str) -> None:
    go(browser, browser.find_element(By.ID, element_id))


def shoot(browser, path: Path) -> None:
    """The whole page (up to 2400 px tall), not just the window, through the DevTools protocol."""
    size = browser.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": min(2400, size["height"]), "scale": 1}
    shot = browser.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                              "clip": clip})
    path.write_bytes(base64.b64decode(shot["data"]))


def text(browser, element_id: str) -> str:
    return browser.find_element(By.ID, element_id).text


def http_as(browser, server) -> httpx.Client:
    """Plain HTTP with the browser's session cookie: the status codes behind what the browser shows."""
    cookie = browser.get_cookie(COOKIE)
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    return httpx.Client(base_url=server.url, cookies={COOKIE: cookie["value"]})


def test_a_bad_key_is_refused_and_pages_need_a_session(browser, server, shots):
    browser.delete_all_cookies()
    browser.get(f"{server.url}/ui/tenants/acme")
    assert "/ui/login" in browser.current_url
    browser.find_element(By.ID, "key").send_keys("sk_nope_nope")
    click(browser, "login")
    assert "not valid" in text(browser, "login-error")
    shoot(browser, shots / "login.png")
    assert httpx.get(f"{server.url}/ui/forecast", follow_redirects=False).status_code == 303


def test_navigate_tenant_schedule_occurrence_pause_resume_trigger_and_rerun(browser, server, shots):
    login(browser, server, "acme")
    row = browser.find_element(By.CSS_SELECTOR, 'tr[data-tenant="acme"]')
    assert row.find_element(By.CSS_SELECTOR, ".use").text == str(STRICT_AT_7 + FLEXIBLE_AT_7 + 2)
    assert not browser.find_elements(By.ID, "engine-backlog")  # scheduler-wide figures: admin keys only

    go(browser, row.find_element(By.LINK_TEXT, "acme"))
    listed = {r.get_attribute("data-schedule") for r in browser.find_elements(By.CSS_SELECTOR, "#schedules tr[data-schedule]")}
    assert "nightly-report" in listed and "globex-only" not in listed
    shoot(browser, shots / "tenant.png")
    browser.find_element(By.ID, "q").send_keys("flex")
    click(browser, "search")
    found = {r.get_attribute("data-schedule") for r in browser.find_elements(By.CSS_SELECTOR, "#schedules tr[data-schedule]")}
    assert found == {f"at7-flex-{n}" for n in range(FLEXIBLE_AT_7)}

    browser.get(f"{server.url}/ui/tenants/acme/schedules/nightly-report")
    assert text(browser, "schedule-state") == "ACTIVE"
    click(browser, "pause")
    assert "Pause schedule nightly-report" in text(browser, "confirm-subject")
    shoot(browser, shots / "confirm.png")
    click(browser, "confirm")
    assert text(browser, "schedule-state") == "PAUSED" and "pause: ACCEPTED" in text(browser, "done")
    assert server.env.plane.schedules.get("acme", "nightly-report")["state"] == "PAUSED"
    click(browser, "resume")
    click(browser, "confirm")
    assert text(browser, "schedule-state") == "ACTIVE"
    assert server.env.plane.schedules.get("acme", "nightly-report")["state"] == "ACTIVE"

    reader = server.env.occurrences(("acme",))
    try:
        click(browser, "trigger")
        click(browser, "confirm")
        assert "trigger: ACCEPTED" in text(browser, "done")
        got = reader.until(lambda r: any(x.record["schedule_id"] == "nightly-report" for x in r), timeout=60)
        occurrence = next(x.record for x in got if x.record["schedule_id"] == "nightly-report")
    finally:
        reader.close()
    FakeWorker(server.env.bootstrap, server.env.prefix).run(occurrence, "SUCCEEDED")
    oid = occurrence["occurrence_id"]
    assert until(lambda: bool(browser.find_elements(By.CSS_SELECTOR, f'tr[data-occurrence="{oid}"]')),
                 reload=browser.refresh), "the triggered occurrence is not listed on its schedule's page"
    shoot(browser, shots / "schedule.png")
    go(browser, browser.find_element(By.LINK_TEXT, oid))
    assert until(lambda: text(browser, "occurrence-state") == "SUCCEEDED", reload=browser.refresh)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#attempts tbody tr")) == 2  # STARTED, SUCCEEDED
    shoot(browser, shots / "occurrence.png")
    click(browser, "rerun")
    click(browser, "confirm")
    assert "rerun: ACCEPTED" in text(browser, "done")
    # The scheduler's lag histogram (its /metrics) has the triggered and re-run occurrences.
    login(browser, server, "admin")
    assert text(browser, "engine-backlog").isdigit()
    assert until(lambda: any(text(browser, lane).endswith("s") for lane in ("engine-lag-strict", "engine-lag-catchup")),
                 reload=browser.refresh)
    shoot(browser, shots / "tenants.png")


def test_update_shows_a_dry_run_diff_and_applies_only_when_confirmed(browser, server, shots):
    login(browser, server, "acme")
    browser.get(f"{server.url}/ui/tenants/acme/schedules/at7-strict-0")
    field = browser.find_element(By.ID, "upd-expression")
    field.clear()
    field.send_keys("37 * * * *")
    click(browser, "dry-run")
    changed = browser.find_elements(By.CSS_SELECTOR, "#diff tr.changed")
    assert len(changed) == 10
    assert server.env.plane.schedules.get("acme", "at7-strict-0")["spec"]["expression"] == "7 * * * *"
    shoot(browser, shots / "diff.png")
    click(browser, "cancel")
    assert server.env.plane.schedules.get("acme", "at7-strict-0")["version"] == 1


def test_next_fires_flag_the_dst_shifted_one(browser, server, shots):
    login(browser, server, "acme")
    browser.get(f"{server.url}/ui/tenants/acme/schedules/dst-shifted")
    rows = browser.find_elements(By.CSS_SELECTOR, "#next-fires tbody tr")
    assert len(rows) == 20
    shifted = [r for r in rows if "gap_shifted" in r.text]
    assert shifted and all("03:00:00" in r.text and "UTC-04:00" in r.text for r in shifted)
    for row in rows:  # flagged exactly when the time core says DST moved it or the offset changed
        flagged = "dst" in (row.get_attribute("class") or "").split()
        assert flagged == ("gap_shifted" in row.text or "offset changed" in row.text), row.text
    assert any("dst" not in (r.get_attribute("class") or "").split() for r in rows)
    shoot(browser, shots / "schedule-dst.png")


def test_forecast_counts_match_the_schedules_created_for_the_test(browser, server, shots):
    login(browser, server, "acme")
    assert server.indexes.wait_applied(30)
    browser.get(f"{server.url}/ui/forecast?tenant=acme")
    rows = browser.find_elements(By.CSS_SELECTOR, "#minutes tr[data-minute]")
    at7 = [r for r in rows if int(r.get_attribute("data-minute")) % 3600 == 7 * 60]
    assert len(at7) >= 5  # one per hour of the 6-hour window (the first may have passed)
    for row in at7:
        assert row.find_element(By.CSS_SELECTOR, ".strict").text == str(STRICT_AT_7)
        assert row.find_element(By.CSS_SELECTOR, ".flexible").text == str(FLEXIBLE_AT_7)
    peaks = browser.find_elements(By.CSS_SELECTOR, "#peaks tr[data-minute]")
    peak_at7 = [p for p in peaks if int(p.get_attribute("data-minute")) % 3600 == 7 * 60]
    assert peak_at7, "the minute-7 wall is among the peaks"
    busiest = peak_at7[0].find_element(By.CSS_SELECTOR, ".second")
    assert busiest.get_attribute("data-second") == peak_at7[0].get_attribute("data-minute")
    assert f"acme strict {STRICT_AT_7}" in busiest.text and f"acme flexible {FLEXIBLE_AT_7}" in busiest.text

    # Pausing a schedule takes its fires out of the forecast.
    def top_of_hour_rows() -> list:
        return [r for r in browser.find_elements(By.CSS_SELECTOR, "#minutes tr[data-minute]")
                if int(r.get_attribute("data-minute")) % 3600 == 0]
    assert top_of_hour_rows()
    server.env.plane.client.pause("acme", "nightly-report")
    assert until(lambda: not top_of_hour_rows(), reload=browser.refresh)
    server.env.plane.client.resume("acme", "nightly-report")
    assert until(lambda: bool(top_of_hour_rows()), reload=browser.refresh)
    browser.get(f"{server.url}/ui/forecast")
    shoot(browser, shots / "forecast.png")


def test_a_tenant_key_never_sees_another_tenants_pages_or_data(browser, server, shots):
    acme_occurrence = next(iter(server.env.plane.occurrences.for_schedule("acme", "nightly-report")), None)
    login(browser, server, "globex")
    assert {r.get_attribute("data-tenant") for r in browser.find_elements(By.CSS_SELECTOR, "#tenants tr[data-tenant]")} \
        == {"globex"}
    paths = ["/ui/tenants/acme", "/ui/tenants/acme/schedules/nightly-report", "/ui/forecast?tenant=acme",
             "/ui/tenants/acme/schedules/nightly-report/confirm/pause",
             "/ui/tenants/globex/schedules/nightly-report", "/ui/tenants/nosuch"]
    if acme_occurrence is not None:
        paths += [f"/ui/tenants/acme/occurrences/{acme_occurrence['occurrence_id']}",
                  f"/ui/tenants/globex/occurrences/{acme_occurrence['occurrence_id']}"]
    http = http_as(browser, server)
    for path in paths:
        browser.get(server.url + path)
        assert text(browser, "error-status") == "404", path
        assert http.get(path).status_code == 404, path
    shoot(browser, shots / "not-found.png")
    csrf = browser.find_element(By.NAME, "csrf").get_attribute("value")
    refused = http.post("/ui/tenants/acme/schedules/nightly-report/pause", data={"csrf": csrf, "version": ""})
    assert refused.status_code == 404
    assert server.env.plane.schedules.get("acme", "nightly-report")["state"] == "ACTIVE"
    browser.get(f"{server.url}/ui/forecast")
    assert "acme" not in browser.page_source and "globex" in browser.page_source
    browser.get(f"{server.url}/ui/tenants")
    assert "acme" not in browser.page_source
    assert http.post("/ui/tenants/globex/schedules/globex-only/pause",
                     data={"csrf": "forged", "version": ""}).status_code == 403
    assert urllib.parse.urlparse(browser.current_url).path == "/ui/tenants"
