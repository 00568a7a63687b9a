"""A spider with a ban hook, run by test_scrapy_middleware in its own process."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import scrapy
from scrapy.http import Request, Response

OUT = Path(os.environ.get("CRAWL_OUT", "."))


class HookSpider(scrapy.Spider):
    """Fetches /page/0..PAGES-1; a "soft-block" page is a ban only this spider knows of."""

    name = "hooks"
    custom_settings = {  # noqa: RUF012
        "DOWNLOADER_MIDDLEWARES": {
            "egress_proxies_client.scrapy_middleware.EgressProxiesMiddleware": 740,
        },
        "EGRESS_PROXIES_API_URL": os.environ.get("EGRESS_PROXIES_API_URL"),
        "EGRESS_PROXIES_TOKEN": os.environ.get("EGRESS_PROXIES_TOKEN"),
        "EGRESS_PROXIES_MAX_RETRIES": 3,
        "EGRESS_PROXIES_LEASES_PER_DOMAIN": 1,  # one lease at a time: retries go elsewhere
        "HTTPERROR_ALLOW_ALL": True,
        "RETRY_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False,
        "CONCURRENT_REQUESTS": 1,
        "LOG_LEVEL": "INFO",
        "FEEDS": {str(OUT / "items.jsonl"): {"format": "jsonlines"}},
    }

    def __init__(self, base_url: str, pages: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = [f"{base_url}/page/{n}" for n in range(int(pages))]

    def response_is_ban(self, request: Request, response: Response) -> bool | None:
        """Soft blocks are 200s no default rule knows; None lets the policy decide."""
        return True if b"soft-block" in response.body else None

    def parse(self, response: Response) -> Iterator[dict[str, Any]]:
        """Record what reached the callback."""
        yield {
            "url": response.url,
            "status": response.status,
            "body": response.text,
            "proxy": response.meta.get("egress_proxies_proxy"),
        }

    def closed(self, reason: str) -> None:
        """Dump the stats for the test."""
        assert self.crawler.stats is not None
        stats = {k: v for k, v in self.crawler.stats.get_stats().items() if isinstance(v, int)}
        (OUT / "stats.json").write_text(json.dumps(stats))
