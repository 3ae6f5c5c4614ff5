"""Proxies: the ones the environment names (``https_proxy``, ``http_proxy``, ``all_proxy``,
``no_proxy``, as curl and pip read them), and which one a request goes through."""

from __future__ import annotations

import contextlib
import ipaddress
import urllib.request
from collections.abc import Iterable
from urllib.parse import urlsplit

from ..config import check_http_url
from ..errors import ConfigError
from ..text import shown
from ..urls import redacted


def environment_proxies(urls: Iterable[str]) -> dict[str, str]:
    """The proxies the environment names for requests to ``urls`` (the mirror's, the
    rewrites'), as curl and pip read them: ``https_proxy`` for https URLs, ``http_proxy`` for
    http ones, else ``all_proxy`` (either case; the lower-case name wins), and ``no_proxy`` for
    the hosts reached directly (names, domains, IP addresses and CIDR ranges, ``*``). A proxy
    without a scheme is an http one (``proxy:3128``). Only the schemes the URLs use are looked
    at (a local mirror uses none); a proxy for one of them that is no http(s) URL with a host
    raises :class:`ConfigError`. ``~/.netrc`` is not read: credentials go in the URLs."""
    schemes = {_scheme(url) for url in urls} & {"http", "https"}
    if not schemes:
        return {}
    found = urllib.request.getproxies_environment()
    proxies = {"no": found["no"]} if found.get("no") else {}
    for scheme in sorted(schemes):
        name = scheme if found.get(scheme) else "all"
        value = found.get(name)
        if not value:
            continue
        url = value if "://" in value else f"http://{value}"
        key = f"{name}_proxy"
        if _scheme(url) not in ("http", "https"):
            reason = f"{shown(redacted(value))!r} is not an http(s) proxy URL (http://host:port)"
            raise ConfigError("environment", reason, key)
        check_http_url("environment", url, key, proxy=True)
        proxies[scheme] = url
    return proxies


def _scheme(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


def proxy_for(location: str, proxies: dict[str, str]) -> str | None:
    """The proxy of a request to ``location``, if the environment names one for it
    (``proxies`` as :func:`environment_proxies` gives them)."""
    parts = urlsplit(location)
    proxy = proxies.get(parts.scheme)
    if proxy is None:
        return None
    host = parts.hostname or ""
    try:
        port = parts.port
    except ValueError:  # refused by the request itself
        port = None
    host_port = f"{host}:{port}" if port is not None else host
    return None if _bypassed(host, host_port, proxies) else proxy


def _bypassed(host: str, host_port: str, proxies: dict[str, str]) -> bool:
    """Whether ``no_proxy`` names ``host``: as urllib reads it (``*``, names, domains, with a
    port or not), or by an IP range (``10.0.0.0/8``), which urllib does not read."""
    no_proxy = proxies.get("no", "")
    if not no_proxy:
        return False
    with contextlib.suppress(ValueError):  # not an IP address
        address = ipaddress.ip_address(host)
        for entry in no_proxy.replace(",", " ").split():
            with contextlib.suppress(ValueError):  # not a range
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
    # typeshed does not list this function, public in urllib.request since Python 3.x.
    return bool(urllib.request.proxy_bypass_environment(host_port, proxies))  # type: ignore[attr-defined]
