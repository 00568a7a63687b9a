"""A spider fetching /page/0..N-1 as fast as Scrapy lets it, run by test_scrapy_spread
in its own process: pages with an odd number ride one sticky session."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import scrapy
from scrapy.http import Response

OUT = Path(os.environ.get("CRAWL_OUT", "."))


class PacedSpider(scrapy.Spider):
    """Every page once; each item says which proxy carried it and when it arrived."""

    name = "paced"
    custom_settings = {  # noqa: RUF012
        "DOWNLOADER_MIDDLEWARES": {
            "egress_proxies_client.scrapy_middleware.EgressProxiesMiddleware": 740,
        },
        "EGRESS_PROXIES_API_URL": os.environ.get("EGRESS_PROXIES_API_URL"),
        "EGRESS_PROXIES_TOKEN": os.environ.get("EGRESS_PROXIES_TOKEN"),
        "EGRESS_PROXIES_WAIT": float(os.environ.get("EGRESS_PROXIES_WAIT", "10")),
        "EGRESS_PROXIES_MAX_REQUEUES": 2,
        "EGRESS_PROXIES_LEASES_PER_DOMAIN": 4,
        "CONCURRENT_REQUESTS": 16,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 16,
        "DOWNLOAD_DELAY": 0,
        "HTTPERROR_ALLOW_ALL": True,
        "RETRY_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "INFO",
        "FEEDS": {str(OUT / "items.jsonl"): {"format": "jsonlines"}},
    }

    def __init__(self, base_url: str, pages: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.base_url = base_url
        self.pages = int(pages)

    async def start(self) -> Any:
        """Every page; odd ones in the sticky session "odd"."""
        for n in range(self.pages):
            meta = {"egress_proxies_session": "odd"} if n % 2 else {}
            yield scrapy.Request(f"{self.base_url}/page/{n}", meta=meta)

    def parse(self, response: Response) -> Iterator[dict[str, Any]]:
        """Record what reached the callback."""
        yield {
            "url": response.url,
            "status": response.status,
            "proxy": response.meta.get("egress_proxies_proxy"),
            "at": time.time(),
        }

    def closed(self, reason: str) -> None:
        """Dump the stats (and the close reason) for the test."""
        assert self.crawler.stats is not None
        stats = {
            k: v
            for k, v in self.crawler.stats.get_stats().items()
            if isinstance(v, int | str | float)
        }
        (OUT / "stats.json").write_text(json.dumps(stats | {"reason": reason}))
