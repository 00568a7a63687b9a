"""Reading and using the console's page from a browser driver, as a person would.

Rows are `tr[data-key=...]`, cells `td[data-col=...]`, actions
`button[data-action=...]`. The page redraws what changed every half second,
so every reader here treats an element replaced under it as not there yet.
"""

from __future__ import annotations

from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

from harness.browser import wait_until


def log_in(browser: Chrome, base: str, token: str, view: str = "fleet") -> None:
    """Open the console at `base` and log in with `token`, as a person would."""
    browser.get(f"{base}/console/#/{view}")
    browser.execute_script("sessionStorage.clear()")
    browser.refresh()
    field = wait_until(browser, lambda b: b.find_element(By.ID, "token"))
    field.send_keys(token)
    browser.find_element(By.ID, "open").click()
    wait_until(browser, lambda b: b.find_element(By.ID, "view").is_displayed())


def row(browser: Chrome, key: str) -> WebElement | None:
    """The table row of `key` (a Proxy's namespace/name, a site...), if shown."""
    found = browser.find_elements(By.CSS_SELECTOR, f'tr[data-key="{key}"]')
    return found[0] if found else None


def cell(browser: Chrome, key: str, column: str) -> str | None:
    """The text of a row's cell, None while the row is absent or being redrawn."""
    try:
        found = row(browser, key)
        if found is None:
            return None
        return str(found.find_element(By.CSS_SELECTOR, f'td[data-col="{column}"]').text)
    except StaleElementReferenceException:
        return None


def text(browser: Chrome, element_id: str) -> str | None:
    """An element's text, None while it is absent or being redrawn."""
    try:
        found = browser.find_elements(By.ID, element_id)
        return str(found[0].text) if found else None
    except StaleElementReferenceException:
        return None


def number(browser: Chrome, element_id: str) -> float | None:
    """An element's text as a number, None while it is absent or being redrawn."""
    shown = text(browser, element_id)
    return None if shown is None else float(shown)


def click(browser: Chrome, key: str, action: str) -> None:
    """Click a row's action button, again if the row was redrawn meanwhile."""

    def clicked(b: Chrome) -> bool:
        try:
            found = row(b, key)
            if found is None:
                return False
            found.find_element(By.CSS_SELECTOR, f'button[data-action="{action}"]').click()
        except StaleElementReferenceException:
            return False
        return True

    wait_until(browser, clicked)


def mark_page(browser: Chrome) -> None:
    """A marker a reload would lose: the page must update in place."""
    browser.execute_script("window.sameDocument = true")


def still_same_page(browser: Chrome) -> bool:
    """The page was not reloaded since `mark_page`."""
    return bool(browser.execute_script("return window.sameDocument === true"))
