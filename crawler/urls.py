"""URLs: the credentials a mirror URL may hold, the origin they are for, and the path a
``file://`` URL names.

A private mirror can be given as ``https://user:password@host/...`` (the mirror, or a rewrite's
replacement). The user and password are taken out of the URL: requests to that origin carry
them as basic auth (see :class:`crawler.mirror.http.HTTPTransport`), and every URL the crawler
shows, logs or writes (``mirror`` in ``index.json``, locations in reports and in the state) is
one without them, so that publishing the output never publishes the password.

A query or a fragment is refused in every URL the crawler is given (the mirror, a rewrite, a
declared ref, ``s3.endpoint_url``, a proxy) or the mirror lists (a discovery entry): the paths of
the mirror's files are added to those URLs, and neither form of index URL has one. So no URL the
crawler publishes or requests holds one; the messages that refuse such a URL, and the one naming
where a redirect was not followed to, show it through :func:`redacted`, which leaves out a
query and a fragment as it leaves out credentials (a ``?X-Amz-Signature=``, a ``?token=``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit

#: Where credentials apply: (scheme, host in lowercase, port).
Origin = tuple[str, str, int]

_AUTHORITY = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<authority>[^/?#]*)")


def file_path(location: str) -> str:
    """The filesystem path a ``file://`` URL names (percent-decoded; bytes that are not UTF-8,
    from a folder named in another encoding, come back as they were)."""
    return unquote(urlsplit(location).path, errors="surrogateescape")


def origin_of(url: str) -> Origin | None:
    """The origin of an http(s) URL (its port made explicit); None for other URLs."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        return None
    return scheme, parts.hostname, port or (443 if scheme == "https" else 80)


def without_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """An http(s) URL without the ``user:password@`` (or ``user@``) it may hold, and that user
    and password, percent-decoded; None when it holds none."""
    found = _AUTHORITY.match(url)
    if found is None or found["scheme"].lower() not in ("http://", "https://"):
        return url, None
    userinfo, at, host = found["authority"].rpartition("@")
    if not at:
        return url, None
    user, _, password = userinfo.partition(":")
    return found["scheme"] + host + url[found.end() :], (unquote(user), unquote(password))


def has_userinfo(url: str) -> bool:
    """Whether a URL of any scheme holds a ``user@`` or ``user:password@`` before its host
    (:func:`without_credentials` takes them out of http(s) URLs only)."""
    found = _AUTHORITY.match(url)
    return found is not None and "@" in found["authority"]


#: What :func:`credentials` gives: each URL given, without its credentials, and them (None for
#: a URL given without), the mirror's first.
Given = list[tuple[str, tuple[str, str] | None]]


def credentials(urls: Iterable[str]) -> Given:
    """The user and password of each of ``urls`` (the mirror's first), None for one given
    without: :func:`credentials_for` picks from these."""
    found: Given = []
    for url in urls:  # all of them, so that the mirror's is first whatever it is
        plain, secret = without_credentials(url)
        found.append((_case_folded(plain), secret))
    return found


def credentials_for(location: str, given: Given) -> tuple[str, str] | None:
    """The credentials to send with a request to ``location``: those of the longest URL given
    that it starts with (a rewrite's replacement for its files, the mirror for the rest; none
    if that URL was given without), else the mirror's if it is on the mirror's origin. Never
    another origin's, nor another URL's when its own were not given."""
    origin = origin_of(location)
    if origin is None:
        return None
    location = _case_folded(location)
    same = [(plain, secret) for plain, secret in given if origin_of(plain) == origin]
    for plain, secret in sorted(same, key=lambda item: -len(item[0])):
        if location.startswith(plain.rstrip("/") + "/") or location == plain:
            return secret
    mirror = given[0] if given else None
    return mirror[1] if mirror is not None and origin_of(mirror[0]) == origin else None


def _case_folded(url: str) -> str:
    """A URL with its scheme and host in lowercase (as they compare), its path as it is."""
    found = _AUTHORITY.match(url)
    if found is None:
        return url
    return found[0].lower() + url[found.end() :]


def redacted(url: str) -> str:
    """A URL as a message, a log line, a report or a document may show it: the one way the
    crawler renders a URL it was given or sent that could hold a secret. What comes before
    its last ``@`` is left out when it has one (a password with an unencoded ``/``, ``?`` or
    ``#`` is not found as credentials, yet must not be shown), and so is a query or a
    fragment (a presigned URL's signature, a ``?token=``): each is shown as ``…``. A
    ``file://`` URL holds no credentials: an ``@`` in one is a folder's name, shown."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    if scheme.lower() != "file":
        _, at, tail = rest.rpartition("@")
        if at:
            rest = f"…@{tail}"
    cut = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=-1)
    if cut >= 0:
        rest = f"{rest[: cut + 1]}…"
    return f"{scheme}{sep}{rest}"
