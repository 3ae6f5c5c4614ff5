"""The sync's binaries step (issue 41), between decoding and building: the spec manifest of
each spec not seen before, read once per hash.

For each spec of the branch, one manifest is chosen: the ref's top-level cache's where it holds
the spec (a v3 cache), else the first stack's (by label) whose cache is v3; a spec of no v3
cache has none. What was read of a manifest never changes for its hash, so it is kept, by
branch, in ``.crawler/binaries/<branch>.json``, and only the specs not in it are read: on the
public mirror's develop, two requests (the manifest, a ``HEAD`` of its tarball) for each of
its 60,000 specs the first night, a few thousand after. Only clean facts are kept (a manifest
read, its tarball there, no finding): a missing or unsound binary is looked at again the next
night, and is reported until then. The file holds the branch's current specs alone (bounded
by its size); deleting it only makes the next sync read every manifest again, and one that
cannot be read (damaged, too large) is taken for none.

Checking that every stack's copy is still there is ``crawler audit``'s job.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import msgspec

from ..build.binaries import Facts
from ..errors import OutputError
from ..linkfile import PackedLinks
from ..mirror.binaries import SPEC_FOLDER, BinaryFacts, Keyrings, look_up
from ..mirror.fetch import Fetcher
from ..mirror.signing import gpg_program
from ..output.kept import MISSING, KeptFolder
from ..output.workdir import work_folder

log = logging.getLogger(__name__)

#: The largest store read (a 60,000-spec branch's is about 20 MB).
STORE_LIMIT = 256 << 20


class _Kept(msgspec.Struct, gc=False, array_like=True):
    stack: str
    facts: BinaryFacts


class _Store(msgspec.Struct, gc=False):
    specs: dict[str, _Kept]


def store_folder(output: Path) -> KeptFolder:
    """Where what was read of each branch's spec manifests is kept (``<branch>.json``), reached
    as every folder of ``.crawler/`` is: never through a link."""
    return work_folder(output, "binaries")


#: How the path of a spec manifest under its cache starts (a v3 cache's).
_V3_PATH = SPEC_FOLDER.removeprefix("/")


def chosen(links: PackedLinks, root: str) -> dict[str, tuple[str, str]]:
    """The manifest read for each spec (hash: stack, URL): the root's, else the first stack's
    of a v3 cache."""
    picked = {}
    caches = links.caches
    for spec, entry in links.specs.items():
        v3 = {
            s: path
            for path, stacks in entry.paths.items()
            if path.startswith(_V3_PATH)
            for s in stacks
        }
        if v3:
            stack = root if root in v3 else min(v3)
            picked[spec] = (stack, f"{caches[stack]}/{v3[stack]}")
    return picked


async def read_binaries(
    fetcher: Fetcher,
    output: Path,
    branch: str,
    links: PackedLinks,
    root: str,
) -> Facts:
    """The facts of each spec's binary, those not kept read now, at most ``concurrency`` at
    once; the store written anew. What is kept of a spec is used only when it was read from
    the manifest chosen now: the output may have been switched to another mirror, or the
    spec moved to another stack, since."""
    folder, name = store_folder(output), f"{branch}.json"
    kept = _load(folder, name)
    wanted = chosen(links, root)
    facts: dict[str, tuple[str, BinaryFacts]] = {}
    new = []
    for spec, (stack, url) in wanted.items():
        known = kept.get(spec)
        if known is not None and (known.stack, known.facts.manifest) == (stack, url):
            facts[spec] = (stack, known.facts)
        else:
            new.append((spec, stack, url))
    pending = iter(new)
    async with Keyrings(fetcher, gpg_program()) as keyrings:

        async def worker() -> None:
            for spec, stack, url in pending:
                facts[spec] = (stack, await look_up(fetcher, url, keyrings))

        workers = max(1, min(fetcher.config.concurrency, len(new)))
        await asyncio.gather(*(worker() for _ in range(workers)))
    log.info("%s: %d spec manifests read, %d known", branch, len(new), len(wanted) - len(new))
    clean = {s: _Kept(stack, f) for s, (stack, f) in facts.items() if f.finding is None}
    if not clean and not kept:  # a branch of no v3 cache: nothing to keep
        return facts
    try:
        data = msgspec.json.encode(_Store(dict(sorted(clean.items()))))
        folder.write(name, data, durable=False)
    except OutputError as err:  # only a cache: the next sync reads these manifests again
        log.warning("%s: %s (what was read of its binaries is not kept)", branch, err)
    return facts


def _load(folder: KeptFolder, name: str) -> dict[str, _Kept]:
    try:
        return msgspec.json.decode(folder.read(name, STORE_LIMIT), type=_Store).specs
    except MISSING:
        return {}
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as err:
        path = folder.path / name
        log.warning("ignoring unreadable %s (every manifest is read again): %s", path, err)
        return {}
