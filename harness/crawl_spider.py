"""The spider the acceptance crawl runs in its own process (`scrapy runspider`).

It records every page it is handed and any answer that is not a page, and dumps
the crawler's stats when it closes. Configured by environment variables.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import scrapy
from scrapy.http import Response

OUT = Path(os.environ.get("CRAWL_OUT", "."))


class SiteSpider(scrapy.Spider):
    """Follows every link; yields {"page": n}, or {"bad": status} for anything else."""

    name = "site"
    custom_settings = {  # noqa: RUF012
        "DOWNLOADER_MIDDLEWARES": {
            "egress_proxies_client.scrapy_middleware.EgressProxiesMiddleware": 740,
        },
        "EGRESS_PROXIES_API_URL": os.environ.get("EGRESS_PROXIES_API_URL"),
        "EGRESS_PROXIES_TOKEN": os.environ.get("EGRESS_PROXIES_TOKEN"),
        "EGRESS_PROXIES_SELECTOR": os.environ.get("EGRESS_PROXIES_SELECTOR", "{}"),
        "EGRESS_PROXIES_TTL": 60,
        "EGRESS_PROXIES_WAIT": 60,
        "EGRESS_PROXIES_MAX_RETRIES": 20,
        "HTTPERROR_ALLOW_ALL": True,  # a leaked refusal would reach parse() and be counted
        "RETRY_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "COOKIES_ENABLED": False,
        "TELNETCONSOLE_ENABLED": False,
        "CONCURRENT_REQUESTS": int(os.environ.get("CRAWL_CONCURRENCY", "8")),
        "CONCURRENT_REQUESTS_PER_DOMAIN": int(
            os.environ.get("CRAWL_CONCURRENCY_PER_DOMAIN", os.environ.get("CRAWL_CONCURRENCY", "8"))
        ),
        "LOG_LEVEL": "INFO",
        "FEEDS": {str(OUT / "items.jsonl"): {"format": "jsonlines"}},
    }
    if "CRAWL_LEASES_PER_DOMAIN" in os.environ:  # else the middleware's default: no bound
        custom_settings["EGRESS_PROXIES_LEASES_PER_DOMAIN"] = int(
            os.environ["CRAWL_LEASES_PER_DOMAIN"]
        )

    def __init__(self, start_url: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = start_url.split()  # one site, or several separated by spaces

    def parse(self, response: Response) -> Iterator[Any]:
        """A page: record it and follow its links; anything else: record it as bad."""
        number = response.css("h1::attr(data-n)").get()
        if response.status != 200 or number is None:
            yield {"bad": response.status, "url": response.url}
            return
        yield {
            "page": int(number),
            "proxy": response.meta.get("egress_proxies_proxy"),
            "host": response.url.split("/")[2],
        }
        yield from response.follow_all(response.css("a::attr(href)").getall(), self.parse)

    def closed(self, reason: str) -> None:
        """Dump the stats for the test."""
        assert self.crawler.stats is not None
        stats = {k: v for k, v in self.crawler.stats.get_stats().items() if isinstance(v, int)}
        (OUT / "stats.json").write_text(json.dumps(stats | {"finish_reason": reason}))
