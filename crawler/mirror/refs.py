"""Finding a mirror's refs, whichever kind of mirror it is (docs/mirrors.md).

In this order, the first that applies:

1. ``refs`` declared in the config: those refs, each index where the config says (a cache root,
   a view of one, or an index's URL); the mirror's discovery document is not read.
2. The mirror's discovery document, ``cache_spack_io_index.json`` (:mod:`.discovery`), as the
   public mirror publishes it: when it exists it is the mirror's word, and nothing else is
   looked for.
3. A plain build cache at the mirror (:mod:`.layout`): its top-level index is one ref, named
   by ``--branch`` or after the mirror (:func:`top_name`), and each index view is a ref named
   after the view: the views the config names (``views``), those a listing finds where the
   mirror can be listed (a folder, S3), and where it cannot (HTTP) the branches asked for,
   each looked up where Spack reads a view (``v3/manifests/index/<view>/index.manifest.json``).
   A ``--mirror`` naming an index itself (``.../build_cache/index.json``,
   ``.../index.manifest.json``) is that cache.

A ref whose index cannot be used (a manifest that is not JSON, lists no index blob, or only
versions not read here; a view asked for that is not there; a name that cannot be a branch's,
:func:`~crawler.files.branch_name_problem`) is kept with the reason in
:attr:`Discovery.problems`, as the discovery document's bad refs are: syncing it fails, the
others go on. A mirror that is none of the three fails naming every place looked at (exit 3,
:class:`~crawler.errors.NotACacheError`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Sequence
from typing import TypeVar
from urllib.parse import urlsplit

from ..config import Config
from ..config.model import DeclaredRef, IndexPlace
from ..errors import CrawlerError, IndexFormatError, NotACacheError, NotFoundError
from ..files import branch_name_problem
from ..text import shown
from ..urls import file_path
from .discovery import ROOT_LABEL, Discovery, Mirror, Source, parse_discovery
from .fetch import Fetcher
from .layout import MANIFEST_FILE, Place, absent, relative, resolve, unspelt

log = logging.getLogger(__name__)

#: The most entries of the views folder looked at: each is a manifest to read.
MAX_VIEWS = 10_000
#: The name of a plain cache's top-level ref when the mirror's path gives none (``/``).
FALLBACK_NAME = "root"

T = TypeVar("T")


async def find_refs(
    fetcher: Fetcher, mirror: Mirror, config: Config, asked: Sequence[str] = ()
) -> Discovery:
    """The refs of the mirror and their sources (see the module docstring for the order);
    ``asked``, the branches named on the command line, may name a plain cache's top-level
    index."""
    if config.refs:
        return await declared_refs(fetcher, mirror, config)
    url = mirror.discovery_url
    try:
        body = await fetcher.read(url)
    except NotFoundError:
        found = await plain_cache(fetcher, mirror, config, asked)
        log.info("%s: no discovery document; a plain build cache", found.url)
        return found
    if config.views:
        log.warning("%s: the discovery document wins; views %s are not read", url, config.views)
    return parse_discovery(body, url, mirror, config)


async def declared_refs(fetcher: Fetcher, mirror: Mirror, config: Config) -> Discovery:
    """The refs the config declares (``refs``), each index found as its place says."""
    refs: dict[str, tuple[Source, ...]] = {}
    problems: dict[str, str] = {}
    how = f"declared in {config.where('refs')}"
    limit = asyncio.Semaphore(config.concurrency)

    async def one(name: str, ref: DeclaredRef) -> None:
        try:
            sources = await asyncio.gather(
                *(
                    _bounded(limit, _declared(fetcher, mirror, name, label, place))
                    for label, place in ref.places
                )
            )
        except (CrawlerError, ValueError) as err:
            problems[name] = shown(str(err))
            return
        refs[name] = tuple(sorted(sources, key=lambda s: (not s.is_root, s.label)))

    await asyncio.gather(*(one(ref.name, ref) for ref in config.refs))
    return Discovery(
        f"{config.where('refs')} (refs)",
        dict(sorted(refs.items())),
        dict(sorted(problems.items())),
        {name: how for name in sorted(refs)},
    )


async def _declared(
    fetcher: Fetcher, mirror: Mirror, ref: str, label: str, place: IndexPlace
) -> Source:
    given, view = (place, None) if isinstance(place, str) else (place.url, place.view)
    where = f"refs.{ref}.{'root' if label == ROOT_LABEL else 'stacks.' + label}"
    try:
        return await resolve(fetcher, ref, label, Place.of(_located(mirror, given), view))
    except (CrawlerError, ValueError) as err:
        raise ValueError(f"{where}: {err}") from None


def _located(mirror: Mirror, given: str) -> str:
    """A declared place as a URL: a URL as given, a folder as a ``file://`` URL, a relative
    path under the mirror."""
    scheme = given.partition("://")[0].lower() if "://" in given else ""
    if scheme in ("http", "https"):
        return given
    if scheme == "file" or given.startswith(("/", "~")):
        return Mirror.parse(given).base
    if scheme:  # another transport's (s3://): as given
        return given
    return relative(mirror.base, given)


async def plain_cache(
    fetcher: Fetcher, mirror: Mirror, config: Config, asked: Sequence[str] = ()
) -> Discovery:
    """The refs of a plain build cache at the mirror. Raises :class:`NotACacheError`, naming
    every place looked at, when the mirror has no index at all (no top-level index, no view)."""
    place = Place.of(mirror.base)
    views: list[str] = []
    listed = True
    if place.kind == "cache" and not place.view:  # not one index named: the views, too
        views, listed = await _views(fetcher, place, config, asked)
    name = place.view or top_name(place.cache, asked, views)
    top = await _guarded(resolve(fetcher, name, ROOT_LABEL, place))
    looked = [f"{mirror.discovery_url} (a discovery document)"]
    found: list[tuple[str, Place, Source | str]] = []
    if isinstance(top, Source) and not await _there(fetcher, place, top):
        looked += _top_places(place, top)
    else:
        found.append((name, place, top))
    limit = asyncio.Semaphore(config.concurrency)
    of_views = [_bounded(limit, _view(fetcher, place, v)) for v in views]
    absent_named: list[tuple[str, Place, Source | str]] = []
    for view, source in zip(views, await asyncio.gather(*of_views), strict=True):
        where = Place(place.cache, "cache", view)
        if isinstance(source, Source) and absent(source):  # a listed folder so is no view
            looked.append(f"{source.location} (view {view!r})")
            if view in config.views or view in asked:  # asked for: say it is not there
                missing = f"view {view!r} not found: no {source.location}"
                if not listed and view not in config.views:
                    missing += _unlisted(place)
                absent_named.append((view, where, missing))
        else:
            found.append((view, where, source))
    if not found:
        raise NotACacheError(mirror.base, tuple(looked), _no_folder(mirror))
    if not listed and not config.views and not asked:  # crawler branches, sync --all
        log.warning(
            "%s: views cannot be listed over %s: only those named are read; name them in the "
            "config (views: [<view>, ...]) or ask for one (--branch <view>)",
            place.cache,
            urlsplit(place.cache).scheme,
        )
    return _plain(place, found + absent_named)


def _top_places(place: Place, top: Source) -> list[str]:
    """Where the top-level index of ``place`` was looked for, found at none."""
    if place.kind != "cache" or place.view is not None:
        return [top.location]
    return [
        f"{top.location} (a build cache's index, Spack 1.0+)",
        f"{place.v2_index} (a build cache's index, Spack 0.18-0.23)",
    ]


def _no_folder(mirror: Mirror) -> bool:
    """Whether the mirror is a local path that is not there at all."""
    return mirror.is_local and not os.path.lexists(file_path(mirror.base))


def _unlisted(place: Place) -> str:
    """What a view not found in a cache that cannot be listed was looked up as."""
    scheme, top = urlsplit(place.cache).scheme, plain_name(place.cache)
    return (
        f" (views cannot be listed over {scheme}: a branch asked for is a view, looked up there,"
        f" unless it is {top!r}, the top-level index's name; declare refs to name that index"
        " otherwise)"
    )


async def _there(fetcher: Fetcher, place: Place, source: Source) -> bool:
    """Whether the index of ``source`` is there: a manifest was found, or (an index file
    named outright) a look finds the file."""
    if place.kind in ("v2", "blob"):
        return await fetcher.confirmed(source.location)
    return not absent(source)


async def _view(fetcher: Fetcher, place: Place, view: str) -> Source | str:
    """A view's source (its manifest not found: :func:`absent`), or why it cannot be used. One
    whose name cannot be a branch's is refused unread."""
    refused = branch_name_problem(view, "view")
    if refused is not None:
        return refused
    return await _guarded(resolve(fetcher, view, ROOT_LABEL, Place(place.cache, "cache", view)))


async def _views(
    fetcher: Fetcher, place: Place, config: Config, asked: Sequence[str]
) -> tuple[list[str], bool]:
    """The views of the cache at ``place`` to look up, and whether the cache could be listed:
    those named in the config, and those a listing finds; where the cache cannot be listed
    (HTTP), each branch asked for but the top-level index's name, each looked up where Spack
    reads a view (never replaced by another index)."""
    folder = place.views_folder
    listed = await fetcher.listdir(folder)
    if listed is None:
        top = plain_name(place.cache)
        found = [name for name in asked if name != top]
    elif len(listed) > MAX_VIEWS:  # the mirror's fault: exit 3
        raise IndexFormatError(
            folder, f"lists {len(listed):,} entries: at most {MAX_VIEWS:,} views are read"
        )
    else:
        found = [name for name in listed if name != MANIFEST_FILE]
    return sorted({*config.views, *found}), listed is not None


def _plain(place: Place, found: list[tuple[str, Place, Source | str]]) -> Discovery:
    refs: dict[str, tuple[Source, ...]] = {}
    problems: dict[str, str] = {}
    how: dict[str, str] = {}
    for name, where, source in found:
        refused = branch_name_problem(name, "view" if where.view else "ref")
        if name in refs or name in problems:  # a view named as the mirror is
            problems[name] = "the top-level index and a view share this name: declare refs"
            refs.pop(name, None)
        elif refused is not None or isinstance(source, str):
            problems[name] = refused or str(source)
        else:
            refs[name], how[name] = (source,), where.describe()
    return Discovery(place.cache, dict(sorted(refs.items())), dict(sorted(problems.items())), how)


def top_name(cache: str, asked: Sequence[str], views: Sequence[str]) -> str:
    """The ref name of a plain cache's top-level index: the one branch asked for that is no
    view's name (``crawler sync --mirror /srv/cache --branch site``; over HTTP, where views
    cannot be listed, each name asked for but the cache's own is a view), else :func:`plain_name`.
    Two such names leave it at :func:`plain_name`, and both fail as unknown branches: one
    index under two names would be published twice."""
    others = [name for name in dict.fromkeys(asked) if name not in views]
    return others[0] if len(others) == 1 else plain_name(cache)


def plain_name(cache: str) -> str:
    """The ref name of a plain cache's top-level index: the last part of its path (a folder's
    name: ``/srv/spack-cache`` is ``spack-cache``), else its host, else ``root``."""
    parts = urlsplit(cache)
    for name in (unspelt(cache, parts.path.rstrip("/").rpartition("/")[2]), parts.hostname or ""):
        if name and branch_name_problem(name) is None:
            return name
    return FALLBACK_NAME


async def _guarded(work: Awaitable[Source]) -> Source | str:
    """A source, or why its index cannot be used (a problem of its ref, not of the run)."""
    try:
        return await work
    except (CrawlerError, ValueError) as err:
        return shown(str(err))


async def _bounded(limit: asyncio.Semaphore, work: Awaitable[T]) -> T:
    async with limit:
        return await work
