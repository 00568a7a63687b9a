"""python -m egress_proxies_client: the CLI."""

import sys

from egress_proxies_client.cli import main

sys.exit(main())
