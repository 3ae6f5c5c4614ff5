"""Deterministic synthetic Spack build-cache mirrors (tests, the sample mirror, benchmarks).

The builder writes, under one folder, the files a crawler reads from a real mirror: the discovery
document ``cache_spack_io_index.json`` and, per ref and stack, one Database JSON index in the v2
(``build_cache/index.json`` + ``.hash``) or v3 (``blobs/sha256/..`` + manifest) layout. The same
inputs always give byte-identical files. Synthetic conventions (documented choices):

* every spec of a ref is a root record with ``in_buildcache: true`` and ``ref_count: 0``; its
  dependencies (compiler, ``compiler-wrapper``, ``gcc-runtime``, ``python``) are shared records with
  ``in_buildcache: false`` whose ``ref_count`` counts the referencing records of that index;
* a stack index holds the specs listing that stack plus the dependency records they need;
* DB 6/7 nodes always carry a ``compiler``: a spec whose compiler is ``None`` gets
  ``gcc@13.2.0`` there (and no ``gcc-runtime``); in DB 8 and 9 it has no compiler edge at all;
* DB 9 nodes (Spack v1.3, spec-file v6) are DB 8's plus ``annotations`` with
  ``original_specfile_version: 6`` (4 on a node whose compiler is an annotation) and, on a
  record that edges reach with ``virtuals``, ``provided_virtuals``: those virtuals, sorted;
* a DB 6 index can be written in an older writer's spelling (``spelling``, see
  :mod:`bench.spellings`); by default it is Spack v0.18-v0.20's.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import random
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import msgspec

from bench.spellings import check_spelling, respell

__all__ = [
    "SynthRef",
    "SynthSpec",
    "build_mirror",
    "build_plain_cache",
    "generate_specs",
    "index_document",
    "make_hash",
    "page_to_specs",
    "write_index_blobs",
]

VariantValue = bool | str | tuple[str, ...]
FLAGS = ("cflags", "cppflags", "cxxflags", "fflags", "ldflags", "ldlibs")
FALLBACK_COMPILER = "gcc@13.2.0"  # DB 6/7 node compiler of a spec whose compiler is None
PYTHON_VERSION = "3.11.9"
_SALT = "spack-cache-crawler/synth/1"
_ENCODER = msgspec.json.Encoder(order="sorted")


def make_hash(seed: str) -> str:
    """Return a DAG-hash-like string: 32 chars of lowercase base32 of ``sha256(seed)``."""
    digest = hashlib.sha256(seed.encode("utf-8")).digest()
    return base64.b32encode(digest).decode("ascii").lower()[:32]


def _split_compiler(compiler: str) -> tuple[str, str]:
    name, _, version = compiler.partition("@")
    return name, version.lstrip("=")


@dataclass(frozen=True)
class SynthSpec:
    """One concrete spec to place in the build cache of a ref (root index and its ``stacks``)."""

    name: str
    version: str
    platform: str = "linux"
    os: str = "ubuntu24.04"
    target: str | dict[str, object] = "x86_64_v3"
    compiler: str | None = "gcc@13.2.0"
    variants: tuple[tuple[str, VariantValue], ...] = ()
    patches: tuple[str, ...] = ()
    stacks: tuple[str, ...] = ()
    hash: str | None = None
    compiler_via_annotation: bool = False

    @cached_property
    def dag_hash(self) -> str:
        """The given ``hash``, else one derived from every field but ``stacks``."""
        if self.hash is not None:
            return self.hash
        fields: list[object] = [
            self.name,
            self.version,
            self.platform,
            self.os,
            self.target,
            self.compiler,
        ]
        fields += [[[k, list(v) if isinstance(v, tuple) else v] for k, v in self.variants]]
        fields += [list(self.patches), self.compiler_via_annotation]
        return make_hash(_SALT + json.dumps(fields, sort_keys=True))


@dataclass(frozen=True)
class SynthRef:
    """One ref of the mirror: its specs, Database version and URL layout."""

    name: str
    specs: tuple[SynthSpec, ...]
    db_version: int = 8
    layout: str = "v2"
    extra_stacks: tuple[str, ...] = ()
    spelling: str = ""  # DB 6 only: see :mod:`bench.spellings`


@dataclass(frozen=True)
class _Edge:
    name: str
    hash: str
    deptypes: tuple[str, ...]
    virtuals: tuple[str, ...]


class _IndexBuilder:
    """Builds the Database JSON of any subset of one ref's specs, caching encoded records."""

    def __init__(self, db_version: int, spelling: str = "") -> None:
        if db_version not in (6, 7, 8, 9):
            raise ValueError(f"unsupported synthetic database version {db_version}")
        check_spelling(spelling, db_version)
        self.db = db_version
        self.spelling = spelling
        self._dep_nodes: dict[str, dict[str, Any]] = {}
        self._provides: dict[str, set[str]] = {}  # DB 9: a record's hash -> virtuals edges ask
        self._records: dict[str, tuple[bytes, tuple[str, ...]]] = {}

    def _base_node(self, name: str, version: str, spec: SynthSpec, params: dict[str, Any]) -> Any:
        node: dict[str, Any] = {
            "name": name,
            "version": version,
            "arch": {"platform": spec.platform, "platform_os": spec.os, "target": spec.target},
            "namespace": "builtin",
            "parameters": params,
            "package_hash": make_hash(f"package:{name}@{version}"),
        }
        if self.db < 8:
            cname, cversion = _split_compiler(spec.compiler or FALLBACK_COMPILER)
            node["compiler"] = {"name": cname, "version": cversion}
        return node

    def _dep(self, spec: SynthSpec, name: str, version: str, external: bool = False) -> str:
        """Hash of the shared dependency record ``name@version`` on the arch of ``spec``."""
        compiler = (spec.compiler or FALLBACK_COMPILER) if self.db < 8 else None
        key = [name, version, spec.platform, spec.os, spec.target, compiler, external]
        dep_hash = make_hash("dep:" + json.dumps(key, sort_keys=True))
        if dep_hash not in self._dep_nodes:
            params: dict[str, Any] = {flag: [] for flag in FLAGS}
            params["build_system"] = "generic"
            node = self._base_node(name, version, spec, params)
            node["hash"] = dep_hash
            if external:
                node["external"] = {"module": None, "path": "/usr"}
            self._dep_nodes[dep_hash] = node
        return dep_hash

    def _edges(self, spec: SynthSpec) -> list[_Edge]:
        edges: list[_Edge] = []
        if spec.compiler is not None:
            cname, cversion = _split_compiler(spec.compiler)
            if self.db >= 8 and not spec.compiler_via_annotation:
                compiler_hash = self._dep(spec, cname, cversion, external=True)
                edges.append(_Edge(cname, compiler_hash, ("build",), ("c", "cxx")))
                wrapper_hash = self._dep(spec, "compiler-wrapper", "1")
                edges.append(_Edge("compiler-wrapper", wrapper_hash, ("build",), ()))
            if cname == "gcc":
                runtime_hash = self._dep(spec, "gcc-runtime", cversion)
                edges.append(_Edge("gcc-runtime", runtime_hash, ("link",), ()))
        if spec.name.startswith("py-"):
            python_hash = self._dep(spec, "python", PYTHON_VERSION)
            edges.append(_Edge("python", python_hash, ("build", "run"), ()))
        return sorted(edges, key=lambda e: e.name)

    def _edge_json(self, edge: _Edge) -> dict[str, Any]:
        if self.db == 6:
            return {"name": edge.name, "hash": edge.hash, "type": list(edge.deptypes)}
        params = {"deptypes": list(edge.deptypes), "virtuals": list(edge.virtuals)}
        return {"name": edge.name, "hash": edge.hash, "parameters": params}

    def _record(self, spec: SynthSpec) -> tuple[bytes, tuple[str, ...]]:
        """Encoded root record of ``spec`` and the hashes of its dependency records."""
        cached = self._records.get(spec.dag_hash)
        if cached is not None:
            return cached
        params: dict[str, Any] = {flag: [] for flag in FLAGS}
        for key, value in spec.variants:
            if key in params or key == "patches":
                raise ValueError(f"{spec.name}: variant name {key!r} is reserved")
            params[key] = list(value) if isinstance(value, tuple) else value
        if spec.patches:
            params["patches"] = list(spec.patches)
        node = self._base_node(spec.name, spec.version, spec, params)
        node["hash"] = spec.dag_hash
        edges = self._edges(spec)
        if edges:
            node["dependencies"] = [self._edge_json(edge) for edge in edges]
        if self.db == 9:
            node["annotations"] = {"original_specfile_version": 6}
            for edge in edges:
                self._provides.setdefault(edge.hash, set()).update(edge.virtuals)
        if self.db >= 8 and spec.compiler is not None and spec.compiler_via_annotation:
            cname, cversion = _split_compiler(spec.compiler)
            node["annotations"] = {
                "compiler": f"{cname}@={cversion}",
                "original_specfile_version": 4,
            }
        node = respell(node, self.spelling)
        record = {"spec": node, "ref_count": 0, "in_buildcache": True}
        result = (_ENCODER.encode(record), tuple(edge.hash for edge in edges))
        self._records[spec.dag_hash] = result
        return result

    def document(self, specs: Sequence[SynthSpec]) -> bytes:
        """The exact bytes of the index holding ``specs`` and their dependency records."""
        entries: dict[str, bytes] = {}
        ref_counts: Counter[str] = Counter()
        for spec in specs:
            encoded, dep_hashes = self._record(spec)
            if spec.dag_hash in entries:
                raise ValueError(f"duplicate spec hash {spec.dag_hash} ({spec.name})")
            entries[spec.dag_hash] = encoded
            ref_counts.update(dep_hashes)
        for dep_hash, count in ref_counts.items():
            if dep_hash in entries:
                raise ValueError(f"dependency hash {dep_hash} collides with a spec hash")
            record = {"spec": self._dep_node(dep_hash), "ref_count": count, "in_buildcache": False}
            entries[dep_hash] = _ENCODER.encode(record)
        body = b",".join(b'"%s":%s' % (key.encode(), entries[key]) for key in sorted(entries))
        head = b'{"database":{"version":"%d","installs":{' % self.db
        return head + body + b"}}}"

    def _dep_node(self, dep_hash: str) -> dict[str, Any]:
        """The node of a dependency record as this builder's version and spelling write it."""
        node = self._dep_nodes[dep_hash]
        if self.db == 9:
            node = {**node, "annotations": {"original_specfile_version": 6}}
            if self._provides.get(dep_hash):
                node["provided_virtuals"] = sorted(self._provides[dep_hash])
        return respell(node, self.spelling)


def index_document(
    specs: Sequence[SynthSpec], db_version: int, *, stack: str | None = None, spelling: str = ""
) -> bytes:
    """Database JSON of the root index (``stack=None``) or of one stack's index of ``specs``;
    a DB 6 one in an older writer's ``spelling`` (:mod:`bench.spellings`) if given."""
    chosen = specs if stack is None else [s for s in specs if stack in s.stacks]
    return _IndexBuilder(db_version, spelling).document(chosen)


def _check_segment(kind: str, value: str) -> None:
    if not value or "/" in value or value.startswith(".") or (kind == "stack" and value == "root"):
        raise ValueError(f"invalid {kind} name {value!r}")


def _write_index(root: Path, bucket: str, prefix: str, layout: str, db: int, data: bytes) -> str:
    """Write one index under ``root/prefix`` in ``layout``; return its discovery URL."""
    checksum = hashlib.sha256(data).hexdigest()
    base = root / prefix
    if layout == "v2":
        (base / "build_cache").mkdir(parents=True, exist_ok=True)
        (base / "build_cache" / "index.json").write_bytes(data)
        (base / "build_cache" / "index.json.hash").write_bytes(checksum.encode("ascii"))
        return f"s3://{bucket}/{prefix}/build_cache/index.json"
    blob = f"blobs/sha256/{checksum[:2]}/{checksum}"
    (base / blob).parent.mkdir(parents=True, exist_ok=True)
    (base / blob).write_bytes(data)
    entry = {
        "contentLength": len(data),
        "mediaType": f"application/vnd.spack.db.v{db}+json",
        "compression": "none",
        "checksumAlgorithm": "sha256",
        "checksum": checksum,
    }
    manifest = base / "v3" / "manifests" / "index" / "index.manifest.json"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_bytes(json.dumps({"version": 3, "data": [entry]}, indent=2).encode() + b"\n")
    return f"s3://{bucket}/{prefix}/{blob}"


def build_mirror(
    root: Path, refs: Sequence[SynthRef], *, bucket: str = "spack-binaries"
) -> dict[str, list[dict[str, str]]]:
    """Write the mirror of ``refs`` under ``root`` (which should be empty) and its discovery
    document ``root/cache_spack_io_index.json``; return that document.

    Labels of a ref are ``root`` then its stacks sorted; ``extra_stacks`` get a URL in the ref's
    layout whose file is never written (a 404 stack).
    """
    discovery: dict[str, list[dict[str, str]]] = {}
    for ref in refs:
        _check_segment("ref", ref.name)
        if ref.layout not in ("v2", "v3"):
            raise ValueError(f"unknown layout {ref.layout!r} for ref {ref.name}")
        # A subclass of the builder (bench.generate's) may take the version alone.
        extra = (ref.spelling,) if ref.spelling else ()
        builder = _IndexBuilder(ref.db_version, *extra)
        by_stack: dict[str, list[SynthSpec]] = {}
        for spec in ref.specs:
            for label in spec.stacks:
                by_stack.setdefault(label, []).append(spec)
        if set(by_stack) & set(ref.extra_stacks):
            raise ValueError(f"{ref.name}: an extra (404) stack also has specs")
        root_url = _write_index(
            root, bucket, ref.name, ref.layout, ref.db_version, builder.document(ref.specs)
        )
        entries = [{"label": "root", "url": root_url}]
        for label in sorted(set(by_stack) | set(ref.extra_stacks)):
            _check_segment("stack", label)
            prefix = f"{ref.name}/{label}"
            if label in by_stack:
                data = builder.document(by_stack[label])
                url = _write_index(root, bucket, prefix, ref.layout, ref.db_version, data)
            elif ref.layout == "v2":
                url = f"s3://{bucket}/{prefix}/build_cache/index.json"
            else:
                missing = hashlib.sha256(f"missing:{prefix}".encode()).hexdigest()
                url = f"s3://{bucket}/{prefix}/blobs/sha256/{missing[:2]}/{missing}"
            entries.append({"label": label, "url": url})
        discovery[ref.name] = entries
    root.mkdir(parents=True, exist_ok=True)
    text = json.dumps(discovery, indent=2) + "\n"
    (root / "cache_spack_io_index.json").write_bytes(text.encode("utf-8"))
    return discovery


def write_index_blobs(
    cache: Path, blobs: Sequence[tuple[int, bytes]], *, view: str | None = None
) -> Path:
    """Write index blobs (Database version, bytes) under ``cache/blobs/`` and the v3 index
    manifest listing them in that order (the top-level one, or ``view``'s); return its path."""
    entries = [
        _write_blob(cache, data, f"application/vnd.spack.db.v{db}+json", "none")
        for db, data in blobs
    ]
    folder = cache / "v3" / "manifests" / "index"
    manifest = (folder / view if view else folder) / "index.manifest.json"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_bytes(json.dumps({"version": 3, "data": entries}, indent=2).encode() + b"\n")
    (cache / "v3" / "layout.json").write_bytes(b'{"signing": "gpg"}\n')
    return manifest


def _write_blob(cache: Path, data: bytes, media_type: str, compression: str) -> dict[str, Any]:
    """Write ``data`` as a blob of ``cache``; its entry in a v3 manifest."""
    checksum = hashlib.sha256(data).hexdigest()
    blob = cache / "blobs" / "sha256" / checksum[:2] / checksum
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data)
    return {
        "contentLength": len(data),
        "mediaType": media_type,
        "compression": compression,
        "checksumAlgorithm": "sha256",
        "checksum": checksum,
    }


def build_plain_cache(
    cache: Path,
    specs: Sequence[SynthSpec] | None,
    *,
    layout: str = "v3",
    db_versions: Sequence[int] = (8,),
    views: dict[str, Sequence[SynthSpec]] | None = None,
    binaries: bool = False,
) -> None:
    """Write a plain build cache (no discovery document), as ``spack buildcache push`` and
    ``update-index`` leave one: its top-level index of ``specs`` (None: none, a cache with only
    views) in ``layout``; in v3, one blob per Database version of ``db_versions``, listed by
    one manifest, and each view's index (``update-index --name``). With ``binaries`` (v3),
    each spec's manifest and blobs too (:func:`write_binaries`)."""
    if layout == "v2":
        if views:
            raise ValueError("views are a v3 feature")
        data = _IndexBuilder(db_versions[0]).document(specs or ())
        _write_index(cache, "plain", "", "v2", db_versions[0], data)
        return
    if layout != "v3":
        raise ValueError(f"unknown layout {layout!r}")
    builders = [(db, _IndexBuilder(db)) for db in db_versions]
    if specs is not None:
        write_index_blobs(cache, [(db, b.document(specs)) for db, b in builders])
    for view, chosen in sorted((views or {}).items()):
        _check_segment("view", view)
        write_index_blobs(cache, [(db, b.document(chosen)) for db, b in builders], view=view)
    if binaries:
        write_binaries(cache, specs or ())


def write_binaries(
    cache: Path, specs: Sequence[SynthSpec], *, sign: Callable[[bytes], bytes] | None = None
) -> None:
    """Write what ``spack buildcache push`` leaves of each spec in a v3 cache: its manifest,
    ``v3/manifests/spec/<name>/<name>-<version>-<hash>.spec.manifest.json`` (unsigned, or
    clear-signed by ``sign``), listing two gzipped blobs, the tarball and the spec file. Neither
    holds anything real: a line naming the spec, and its name, version and hash as JSON."""
    for spec in specs:
        stem = f"{spec.name}-{spec.version.replace('/', '_')}-{spec.dag_hash}"
        line = f"synthetic binary of {spec.name}@{spec.version} /{spec.dag_hash}\n".encode()
        about = {"name": spec.name, "version": spec.version, "hash": spec.dag_hash}
        entries = [
            _write_blob(cache, gzip.compress(data, mtime=0), media_type, "gzip")
            for media_type, data in (
                ("application/vnd.spack.install.v2.tar+gzip", line),
                ("application/vnd.spack.spec.v5+json", json.dumps(about).encode()),
            )
        ]
        manifest = cache / "v3" / "manifests" / "spec" / spec.name / f"{stem}.spec.manifest.json"
        manifest.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"version": 3, "data": entries}, indent=2).encode() + b"\n"
        manifest.write_bytes(sign(text) if sign else text)


def write_keys(cache: Path, keys: dict[str, bytes]) -> None:
    """Publish public ``keys`` (fingerprint: armoured key) as ``spack gpg publish`` does in a
    v3 cache: each key's manifest and blob, and the key index listing them."""
    folder = cache / "v3" / "manifests" / "key"
    folder.mkdir(parents=True, exist_ok=True)
    for fingerprint, key in keys.items():
        entry = _write_blob(cache, key, "application/pgp-keys", "none")
        text = json.dumps({"version": 3, "data": [entry]}, indent=2).encode()
        (folder / f"{fingerprint}.key.manifest.json").write_bytes(text)
    index = json.dumps({"keys": {fingerprint: {} for fingerprint in keys}}).encode()
    entry = _write_blob(cache, index, "application/vnd.spack.keyindex.v1+json", "none")
    text = json.dumps({"version": 3, "data": [entry]}, indent=2).encode()
    (folder / "keys.manifest.json").write_bytes(text)


def _full_patch(prefix: str) -> str:
    int(prefix, 16)  # raises ValueError if not hex
    return prefix + hashlib.sha256(f"patch:{prefix}".encode()).hexdigest()[len(prefix) :]


def _parse_variants(items: Sequence[str]) -> tuple[list[tuple[str, VariantValue]], list[str]]:
    variants: list[tuple[str, VariantValue]] = []
    patches: list[str] = []
    for item in items:
        if item[:1] in "+~":
            variants.append((item[1:], item[0] == "+"))
            continue
        key, _, value = item.partition("=")
        multi = key.endswith(":")
        key = key.rstrip(":")
        if key == "patches":
            patches.extend(_full_patch(p) for p in value.split(","))
        elif multi or "," in value:
            variants.append((key, tuple(value.split(","))))
        else:
            variants.append((key, value))
    return variants, patches


def page_to_specs(page_text: str) -> tuple[str, str, list[SynthSpec]]:
    """Parse a reference ``specs.md`` page into ``(package, ref, specs)``.

    A page compiler without ``@`` (e.g. ``"-"``) becomes ``None``; ``patches=abc1234`` becomes a
    deterministic full SHA-256 starting with ``abc1234``.
    """
    fields: dict[str, str] = {}
    for line in page_text.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key in ("title", "categories", "spec_details"):
            fields[key] = value
    package = json.loads(fields["title"])
    categories = [c.strip() for c in fields["categories"].strip("[]").split(",")]
    specs: list[SynthSpec] = []
    for detail in json.loads(fields["spec_details"]):
        variants, patches = _parse_variants(detail["variants"])
        compiler = detail["compiler"] if "@" in detail["compiler"] else None
        specs.append(
            SynthSpec(
                name=package,
                version=detail["versions"][0],
                platform=detail["platform"],
                os=detail["os"],
                target=detail["target"],
                compiler=compiler,
                variants=tuple(variants),
                patches=tuple(patches),
                stacks=tuple(s for s in detail["stacks"] if s != "root"),
                hash=detail["hash"],
            )
        )
    return package, categories[1], specs


_NEOVERSE_V1: dict[str, object] = {
    "name": "neoverse_v1",
    "vendor": "ARM",
    "features": ["aes", "asimd", "bf16", "fp", "sha2", "sve"],
    "generation": 0,
    "parents": ["neoverse_n1", "armv8.4a"],
    "cpupart": "0xd40",
}
_ZEN3: dict[str, object] = {
    "name": "zen3",
    "vendor": "AuthenticAMD",
    "features": ["avx", "avx2", "bmi2", "fma", "sse4_2", "vaes"],
    "generation": 0,
    "parents": ["zen2"],
    "cpupart": "",
}
_M1: dict[str, object] = {
    "name": "m1",
    "vendor": "Apple",
    "features": ["aes", "asimd", "fp", "sha3"],
    "generation": 0,
    "parents": ["armv8.4a"],
    "cpupart": "0x022",
}
# (platform, os, target, default compiler)
_ARCHES: tuple[tuple[str, str, str | dict[str, object], str], ...] = (
    ("linux", "ubuntu24.04", "x86_64_v3", "gcc@13.2.0"),
    ("linux", "ubuntu24.04", "x86_64_v3", "gcc@13.2.0"),
    ("linux", "ubuntu22.04", "x86_64_v3", "gcc@11.4.0"),
    ("linux", "ubuntu24.04", "aarch64", "gcc@13.2.0"),
    ("linux", "ubuntu24.04", _NEOVERSE_V1, "gcc@13.2.0"),
    ("linux", "ubuntu22.04", _ZEN3, "gcc@11.4.0"),
    ("darwin", "sequoia", "aarch64", "apple-clang@16.0.0"),
    ("darwin", "sequoia", _M1, "apple-clang@16.0.0"),
)
_BASE_NAMES = (
    "zlib zlib-ng hdf5 netcdf-c openmpi mpich fftw boost petsc trilinos kokkos hypre "
    "superlu-dist openblas lapack cmake curl openssl libpng libjpeg-turbo paraview vtk "
    "adios2 conduit ascent umpire raja py-numpy py-scipy py-pandas py-torch py-jax "
    "py-matplotlib py-h5py py-mpi4py py-pip py-setuptools py-requests py-pyyaml"
)
_BASE_PACKAGES = _BASE_NAMES.split()
_BUILD_SYSTEMS = ("cmake", "autotools", "makefile", "generic", "meson")
_EXTRA_VARIANTS: tuple[tuple[str, tuple[VariantValue, ...]], ...] = (
    ("shared", (True, False)),
    ("debug", (False, True)),
    ("mpi", (True, False)),
    ("openmp", (False, True)),
    ("build_type", ("Release", "RelWithDebInfo", "Debug")),
    ("libs", (("shared",), ("shared", "static"), ("static",))),
    ("cuda_arch", (("80",), ("80", "90"), ("70", "80", "90"))),
)


def generate_specs(
    seed: int,
    n_packages: int,
    *,
    stacks: Sequence[str] = (),
    specs_per_package: tuple[int, int] = (1, 4),
    allow_no_compiler: bool = True,
    annotation_fraction: float = 0.0,
    exclude: Collection[str] = (),
) -> list[SynthSpec]:
    """Deterministic, realistic-looking specs for ``n_packages`` packages (linear time).

    Each package gets 1-3 versions (sometimes a git version), a build system and 0-3 extra
    variants; each of its ``specs_per_package`` specs draws an arch, values, maybe patches and
    0-4 of ``stacks``. ``py-`` specs may have no compiler when ``allow_no_compiler``; a fraction
    ``annotation_fraction`` of compiled specs carries its compiler as a DB 8 annotation.
    Hashes are explicit and unique per (seed, package, index). Names in ``exclude`` are skipped.
    """
    rng = random.Random(seed)
    pool = list(stacks)
    specs: list[SynthSpec] = []
    made = 0
    index = 0
    while made < n_packages:
        base = _BASE_PACKAGES[index % len(_BASE_PACKAGES)]
        round_ = index // len(_BASE_PACKAGES)
        name = base if round_ == 0 else f"{base}-{round_}"
        index += 1
        if name in exclude:
            continue
        made += 1
        versions = [f"{rng.randint(0, 9)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}"]
        for _ in range(rng.randint(0, 2)):
            versions.append(f"{rng.randint(0, 9)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}")
        if rng.random() < 0.1:
            versions.append(f"git.{rng.getrandbits(160):040x}={versions[0]}")
        python = name.startswith("py-")
        build_system = "python_pip" if python else rng.choice(_BUILD_SYSTEMS)
        extras = rng.sample(_EXTRA_VARIANTS, rng.randint(0, 3))
        for number in range(rng.randint(*specs_per_package)):
            platform, os_, target, compiler = rng.choice(_ARCHES)
            chosen: str | None = compiler
            if python and allow_no_compiler and rng.random() < 0.3:
                chosen = None
            values = [("build_system", build_system)] + [
                (key, rng.choice(options)) for key, options in extras
            ]
            n_patches = rng.randint(1, 2) if rng.random() < 0.15 else 0
            patches = tuple(f"{rng.getrandbits(256):064x}" for _ in range(n_patches))
            labels = sorted(rng.sample(pool, rng.randint(0, min(4, len(pool)))))
            specs.append(
                SynthSpec(
                    name=name,
                    version=rng.choice(versions),
                    platform=platform,
                    os=os_,
                    target=target,
                    compiler=chosen,
                    variants=tuple(sorted(values, key=lambda kv: kv[0])),
                    patches=patches,
                    stacks=tuple(labels),
                    hash=make_hash(f"generated:{seed}:{name}:{number}"),
                    compiler_via_annotation=chosen is not None
                    and rng.random() < annotation_fraction,
                )
            )
    return specs
