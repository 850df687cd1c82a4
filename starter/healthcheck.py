"""`python -m starter.healthcheck`: the image's HEALTHCHECK. One image runs the API, a worker
that also serves it, and workers that serve no API, so this probes what the process can have,
on this host, in turn: the API's /healthz (API_HOST / API_PORT), then the metrics a worker
serves without the API (METRICS_ADDRESS) or the Temporal SDK's (TEMPORAL_METRICS_ADDRESS).
Exit 0 when one answers 200; else 1, with one line saying what was tried. A worker that serves
no API and no metrics has nothing to probe: set METRICS_ADDRESS for it."""

from __future__ import annotations

import sys
import urllib.error
import urllib.request

from knowledgeops.config.loading import load_settings
from knowledgeops.config.settings import Settings
from knowledgeops.config.values import SettingsError

TIMEOUT_SECONDS = 3.0
# A server bound to every address is reached on loopback, from inside its own container.
_ANY = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1", "[::]": "::1"}


def _url(host: str, port: int | str, path: str) -> str:
    host = _ANY.get(host, host)
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}{path}"


def probe_urls(settings: Settings) -> list[str]:
    """What the process behind `settings` may answer on, in the order to try."""
    urls = [_url(settings.api_host, settings.api_port, "/healthz")]
    for address in (settings.metrics_address, settings.temporal_metrics_address):
        if address:
            host, _, port = address.rpartition(":")
            urls.append(_url(host, port, "/metrics"))
    return urls


def _answers(url: str) -> str | None:
    """None when `url` answers 200; else what went wrong."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as response:
            status = int(response.status)
    except urllib.error.HTTPError as e:
        status = e.code
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        return f"{url}: {reason}"
    return None if status == 200 else f"{url}: HTTP {status}"


def main() -> int:
    try:
        settings = load_settings()
    except SettingsError as e:
        print(f"unhealthy: invalid settings: {' / '.join(str(e).splitlines())}", file=sys.stderr)
        return 1
    failures = []
    for url in probe_urls(settings):
        failure = _answers(url)
        if failure is None:
            return 0
        failures.append(failure)
    hint = "" if len(failures) > 1 else " (a --no-api worker answers only on METRICS_ADDRESS)"
    print(f"unhealthy: nothing answered: {'; '.join(failures)}{hint}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
