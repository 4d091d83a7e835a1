"""The web IME page in a real browser: headless Chromium (Debian's chromium + chromium-driver, driven by
Selenium, never a downloaded browser) types pinyin into the page served by the real service, sees candidates,
commits them (which the service learns) and reads the text back. CI installs chromium (.ci/run); elsewhere the test skips without it.

With PINYIN_HANZI_SCREENSHOTS=DIR it also writes the page's screenshots (ime_candidates.png, ime_attention.png)
there: docs/images/ holds them, made with a CJK font installed (fonts-wqy-microhei)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from serving import start_service, stop_service

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
WAIT_S = 60  # per conversion at most; the first one also warms the model up
# Flags that work in a container without a display or network: no sandbox (root), no GPU, no phoning home.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=900,1000"]


def _browser_or_skip():
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package")
    if missing:
        message = f"no browser to test the page in: {', '.join(missing)} missing (apt-get install chromium " \
                  f"chromium-driver; pip install selenium)"
        if os.environ.get("CI"):
            pytest.fail(message + ": .ci/run should have installed it")
        pytest.skip(message)


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """A headless Chromium on the service's page (reloaded for each test)."""
    _browser_or_skip()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never fetch a browser or a driver
    process, url = start_service()
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.base_url = url
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
        stop_service(process)


@pytest.fixture
def editor(page):
    return _fresh_editor(page)


def _fresh_editor(driver):
    """The editor of the page loaded anew, empty and focused."""
    from selenium.webdriver.common.by import By

    driver.get(driver.base_url + "/")
    element = driver.find_element(By.ID, "editor")
    element.click()
    return element


def candidates_for(driver, typed: str) -> list[str]:
    """The candidates shown once the conversion of ``typed`` (the composition) has arrived."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def ready(driver):
        listing = driver.find_element(By.ID, "candidates")
        return (driver.find_element(By.ID, "preedit").text == typed and listing.get_attribute("data-for") == typed
                and listing.find_elements(By.CSS_SELECTOR, "li"))

    WebDriverWait(driver, WAIT_S).until(ready, f"no candidates for {typed!r}")
    return [item.text for item in driver.find_elements(By.CSS_SELECTOR, "#candidates li .text")]


def text_becomes(driver, editor, expected: str) -> None:
    """Wait for the editor to hold ``expected`` (a commit waits for its conversion)."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, WAIT_S).until(lambda _: editor.get_attribute("value") == expected,
                                        f"the text never became {expected!r}")


def screenshot(driver, name: str) -> None:
    folder = os.environ.get("PINYIN_HANZI_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(folder) / name))


def test_typing_wo_xiang_qu_bj_commits_hanzi_with_context(page, editor):
    # Space commits the highlighted candidate, so each syllable typed is converted with the hanzi already
    # committed before it as context. "bj" is whatever the converter makes of it (letters passing through
    # today; an abbreviation of bei jing once the converter reads those): the test commits the candidate shown.
    editor.send_keys("wo xiang qu bj")
    shown = candidates_for(page, "bj")
    assert editor.get_attribute("value") == "我想去"
    editor.send_keys("1")
    text_becomes(page, editor, "我想去" + shown[0])
    assert page.find_element("id", "preedit").text == ""
    assert page.find_elements("css selector", "#candidates li") == []


def test_a_phrase_typed_run_together_and_a_click_on_its_candidate(page, editor):
    editor.send_keys("woxiangqubeijing")
    shown = candidates_for(page, "woxiangqubeijing")
    assert "我想去北京" in shown
    from selenium.webdriver.support.ui import WebDriverWait

    canvas = page.find_element("id", "attention")
    WebDriverWait(page, WAIT_S).until(lambda _: canvas.get_attribute("data-shape") == "5x5",
                                      "the attention panel drew no characters x syllables grid")
    screenshot(page, "ime_attention.png")
    page.find_elements("css selector", "#candidates li")[shown.index("我想去北京")].click()
    text_becomes(page, editor, "我想去北京")
    editor.send_keys("ba")  # the committed hanzi are the next conversion's context ...
    assert "吧" in candidates_for(page, "ba")  # ... so a sentence-final ba reads as 吧, not 八
    page.find_element("css selector", "#attention-panel summary").click()  # the candidates alone
    page.execute_script("arguments[0].focus()", editor)  # back to the editor, the cursor where it was
    screenshot(page, "ime_candidates.png")
    editor.send_keys(" ")
    text_becomes(page, editor, "我想去北京吧")


def test_backspace_edits_and_escape_cancels(page, editor):
    from selenium.webdriver.common.keys import Keys

    editor.send_keys("nihao")
    assert "你好" in candidates_for(page, "nihao")
    editor.send_keys(Keys.BACKSPACE, Keys.BACKSPACE)
    candidates_for(page, "nih")  # the composition lost two letters and was converted again
    editor.send_keys(Keys.ESCAPE)
    assert page.find_element("id", "preedit").text == ""
    assert editor.get_attribute("value") == ""
    editor.send_keys("xiexie", " ")
    text_becomes(page, editor, "谢谢")
    editor.send_keys(Keys.BACKSPACE)  # no composition: Backspace edits the text itself
    text_becomes(page, editor, "谢")


def test_a_word_chosen_once_comes_first_the_next_time(page, editor):
    """Committing a candidate teaches the service (POST /learn): typed again, it is the first candidate."""
    import httpx

    httpx.post(page.base_url + "/forget", json={}).raise_for_status()  # what the tests before committed
    editor.send_keys("hewuqi")
    shown = candidates_for(page, "hewuqi")
    assert shown[0] == "和武器" and "核武器" in shown
    editor.send_keys(str(shown.index("核武器") + 1))
    text_becomes(page, editor, "核武器")
    editor = _fresh_editor(page)  # no 核武器 before the cursor as context
    editor.send_keys("hewuqi")
    assert candidates_for(page, "hewuqi")[0] == "核武器"
    httpx.post(page.base_url + "/forget", json={}).raise_for_status()


def test_a_hint_names_a_font_package_while_the_page_cannot_draw_hanzi(page, editor):
    """Without a CJK font every hanzi is drawn as the same box: the page then says which package to install.
    A font that has hanzi (here one loaded into the page, as the browser would use an installed one) takes
    the hint away."""
    import base64

    from selenium.webdriver.support.ui import WebDriverWait

    from cjk_font import cjk_font_bytes

    if shutil.which("fc-list") is None:
        pytest.skip("fc-list (fontconfig) is needed to know whether this machine has a CJK font")
    installed = subprocess.run(["fc-list", ":lang=zh"], capture_output=True, text=True, timeout=60).stdout.strip()
    hint = page.find_element("id", "font-hint")
    assert hint.is_displayed() == (not installed)
    assert "fonts-noto-cjk" in hint.get_attribute("textContent")
    page.execute_script("const face = new FontFace('WenQuanYi Micro Hei', `url(data:font/ttf;base64,${arguments[0]})`);"
                        "document.fonts.add(face); face.load();", base64.b64encode(cjk_font_bytes("WenQuanYi Micro Hei")).decode())
    WebDriverWait(page, WAIT_S).until(lambda _: not hint.is_displayed(), "the hint stayed with a CJK font loaded")
