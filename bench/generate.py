"""Generate a realistic synthetic mirror for benchmarks, deterministic from ``--seed``.

``python bench/generate.py --out DIR [--refs 1] [--stacks 30] [--records 60000] [--db 8]
[--layout v2] [--seed 2025]`` writes, with :func:`bench.synth.build_mirror`, the discovery
document and one index per ref and stack, then prints every index file (bytes, records) and the
time taken. The same arguments always give byte-identical files.

Specs come from :func:`bench.synth.generate_specs` and are then made closer to a real
``develop`` build cache, whose records are much larger than synth's defaults:

* every package gets a variant schema of 4-34 variants (so, with ``build_system`` and the six
  compiler flags, 10-40 ``parameters`` per node, like real nodes): booleans, strings and
  multi-valued lists (``cuda_arch``, ``amdgpu_target``, ...), drawn from a fixed vocabulary;
* targets are generic strings (``x86_64_v3``, ``aarch64``) or real-looking microarchitecture
  objects (``zen4``, ``neoverse_v2``, ``m2``, ...) with full feature lists;
* every root spec is in 1-4 of the ``--stacks`` stacks, chosen with skewed weights (the first
  stacks, e.g. ``e4s``, are the biggest), so the stacks overlap heavily;
* a few specs carry patches; with DB 8 a few carry their compiler as an annotation, and some
  pure-Python specs have no compiler.

* every package also depends on 2-20 common libraries and tools (``zlib-ng``, ``cmake``, ``mpich``
  providing ``mpi``, ...), so a node has 3-24 ``dependencies`` edges like real nodes. synth only
  draws the compiler, ``compiler-wrapper``, ``gcc-runtime`` and ``python`` edges, so these are
  added by :class:`_DepsBuilder`, a subclass of synth's private index builder that
  :func:`generate_mirror` swaps in while :func:`bench.synth.build_mirror` runs. Like synth's
  own dependencies they are shared records with ``in_buildcache: false`` (one per name and arch),
  and each stack index carries the ones its specs need.

Ref ``i`` uses seed ``seed + i``, unless ``--change`` says otherwise: ``nightly`` gives the
one ref ``develop`` a night after the same seed's (2% of its specs replaced by new builds, in
5 of its stacks: :func:`nightly_specs`), ``chain`` gives refs that each share 95% of their
specs with the one before (snapshots: :func:`chained_refs`). Ref names: the first is
``develop``, later DB 8 refs are weekly snapshots ``develop-YYYY-MM-DD``, DB 7 refs
``v0.23.N`` and DB 6 refs ``v0.21.N`` (``--db mixed`` cycles 8, 7, 6 over the refs). ``--db 9``
gives the same specs as ``--db 8`` (same seed), written as Spack v1.3 writes Database 9 (with
``provided_virtuals``): the two benchmarks compare the versions on one content.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import json
import math
import random
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR.parent) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR.parent))

import bench.synth  # noqa: E402
from bench.synth import (  # noqa: E402  (_Edge and _IndexBuilder: see _DepsBuilder)
    SynthRef,
    SynthSpec,
    _Edge,
    _IndexBuilder,
    build_mirror,
    generate_specs,
    write_binaries,
)

#: Bump when the output for the same parameters changes (invalidates cached mirrors).
GENERATOR_VERSION = 1
BUCKET_PREFIX = "s3://spack-binaries/"
MARKER = "bench-mirror.json"
DEFAULT_OUT = BENCH_DIR / "out" / "mirrors"

# Real stack names of a develop ref, biggest first; more stacks get numbered names.
STACK_NAMES = (
    "e4s",
    "ml-linux-x86_64-cuda",
    "ml-linux-x86_64-cpu",
    "e4s-neoverse_v1",
    "data-vis-sdk",
    "ml-linux-aarch64-cuda",
    "e4s-oneapi",
    "radiuss",
    "ml-linux-x86_64-rocm",
    "e4s-rocm-external",
    "ml-linux-aarch64-cpu",
    "e4s-cray-rhel",
    "developer-tools-x86_64_v3-linux-gnu",
    "e4s-neoverse-v2",
    "hep",
    "aws-pcluster-neoverse_v1",
    "radiuss-aws",
    "developer-tools-aarch64-linux-gnu",
    "ml-darwin-aarch64-mps",
    "aws-pcluster-x86_64_v4",
    "e4s-cray-sles",
    "build_systems",
    "radiuss-aws-aarch64",
    "developer-tools-darwin",
    "aws-isc",
    "aws-isc-aarch64",
    "tutorial",
    "e4s-power",
    "bootstrap-x86_64-linux-gnu",
    "bootstrap-aarch64-darwin",
)


def _words(text: str) -> list[str]:
    return text.split()


_BOOL_VARIANTS = _words(
    "adios2 bzip2 caliper complex cxx docs eigen examples fftw fortran gpfs hdf5 hl hwloc "
    "hypre int64 ipo java kokkos lapack libfabric lto lustre lz4 magma metis mumps netcdf "
    "ninja opengl osmesa parmetis petsc pic pmix png profiling python qt raja rocm scotch "
    "slurm ssl static strumpack suite-sparse sundials superlu-dist szip tbb tests threadsafe "
    "tiff tools ucx umpire utilities valgrind X xml zlib zstd"
)
_STRING_VARIANTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("api", ("default", "v114", "v112", "v110", "v18")),
    ("cxxstd", ("11", "14", "17", "20")),
    ("generator", ("make", "ninja")),
    ("precision", ("double", "single")),
    ("threads", ("none", "openmp", "pthreads", "tbb")),
    ("blas_vendor", ("openblas", "mkl", "blis", "armpl")),
    ("fabrics", ("none", "ofi", "ucx", "psm2")),
    ("memchecker", ("none", "valgrind")),
    ("build_stage", ("all", "minimal")),
    ("backend", ("serial", "openmp", "cuda", "hip", "sycl")),
)
_LIST_VARIANTS: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = (
    ("amdgpu_target", (("none",), ("gfx90a",), ("gfx908", "gfx90a"), ("gfx90a", "gfx942"))),
    ("cuda_arch_list", (("none",), ("80",), ("70", "80"), ("70", "75", "80", "86", "90"))),
    ("languages", (("c", "c++"), ("c", "c++", "fortran"), ("c", "c++", "fortran", "lto"))),
    ("schedulers", (("none",), ("slurm",), ("slurm", "lsf", "tm"))),
    ("components", (("core",), ("core", "io", "math"), ("core", "io", "math", "gui", "net"))),
    ("precisions", (("double",), ("float", "double"), ("float", "double", "long_double"))),
)

# Feature lists close to archspec's microarchitectures.json (real indexes embed them whole).
_X86 = _words("mmx sse sse2 ssse3 sse4_1 sse4_2 popcnt cx16 lahf_lm abm movbe xsave")
_AVX2 = _words(
    "avx avx2 bmi1 bmi2 f16c fma aes pclmulqdq rdrand rdseed adx clflushopt xsavec xsaveopt"
)
_AVX512 = _words(
    "avx512f avx512dq avx512cd avx512bw avx512vl avx512_bf16 avx512_vnni avx512ifma "
    "avx512vbmi avx512_vbmi2 avx512_bitalg avx512_vpopcntdq gfni vaes vpclmulqdq"
)
_ARM = _words(
    "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt "
    "fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 asimdfhm dit uscat ilrcpc flagm ssbs paca "
    "pacg"
)


def _target(name: str, vendor: str, features: list[str], parents: list[str], part: str) -> Any:
    return {
        "name": name,
        "vendor": vendor,
        "features": sorted(set(features)),
        "generation": 0,
        "parents": parents,
        "cpupart": part,
    }


_ZEN2 = [*_X86, *_AVX2, "clzero", "sse4a", "clwb", "sha", "fsgsbase", "rdpid", "wbnoinvd"]
_ZEN3 = [*_ZEN2, "vaes", "vpclmulqdq", "pku", "erms", "fsrm", "invpcid", "ospke", "avic"]
_SKX = [*_X86, *_AVX2, "clwb", "erms", "invpcid", "hle", "rtm", "mpx", "pku", "ospke", "sgx"]
_SKX += _words("avx512f avx512vl avx512bw avx512dq avx512cd")
_SPR = [*_SKX, *_AVX512, "amx_bf16", "amx_int8", "amx_tile", "avx512_fp16", "serialize"]
_SPR += _words("movdiri movdir64b cldemote waitpkg tsxldtrk avx_vnni enqcmd")
_N1 = [*_ARM[:16], "asimddp", "ssbs", "dcpop"]
_V1 = [*_ARM, "sve", "svei8mm", "svebf16", "i8mm", "bf16", "dgh", "rng", "dcpodp", "paca"]
_V2 = [*_V1, "sve2", "svebitperm", "svesha3", "svesm4", "sveaes", "svepmull", "flagm2", "frint"]
_M1 = [*_ARM, "sb", "flagm2", "frint", "dcpodp", "sha512", "ssbs"]
# (family, weight, target): a spec's target is replaced by another of the same family.
_TARGETS: tuple[tuple[str, int, str | dict[str, Any]], ...] = (
    ("x86", 5, "x86_64_v3"),
    ("x86", 3, _target("zen2", "AuthenticAMD", _ZEN2, ["zen"], "")),
    ("x86", 3, _target("zen3", "AuthenticAMD", _ZEN3, ["zen2"], "")),
    ("x86", 3, _target("zen4", "AuthenticAMD", _ZEN3 + _AVX512, ["zen3", "x86_64_v4"], "")),
    ("x86", 2, _target("skylake_avx512", "GenuineIntel", _SKX, ["skylake", "x86_64_v4"], "")),
    ("x86", 2, _target("sapphirerapids", "GenuineIntel", _SPR, ["icelake"], "")),
    ("arm", 2, "aarch64"),
    ("arm", 2, _target("neoverse_n1", "ARM", _N1, ["cortex_a72", "armv8.2a"], "0xd0c")),
    ("arm", 4, _target("neoverse_v1", "ARM", _V1, ["neoverse_n1", "armv8.4a"], "0xd40")),
    ("arm", 4, _target("neoverse_v2", "ARM", _V2, ["neoverse_v1", "armv9.0a"], "0xd4f")),
    ("apple", 1, "aarch64"),
    ("apple", 3, _target("m1", "Apple", _M1, ["armv8.4a"], "0x022")),
    (
        "apple",
        3,
        _target("m2", "Apple", [*_M1, "bf16", "i8mm", "ecv"], ["m1", "armv8.6a"], "0x032"),
    ),
)


# Common dependencies (name, version, deptypes, virtuals provided); never a compiler virtual.
_DEPENDENCIES: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("autoconf", "2.72", ("build",), ()),
    ("automake", "1.16.5", ("build",), ()),
    ("berkeley-db", "18.1.40", ("build", "link"), ()),
    ("bzip2", "1.0.8", ("build", "link"), ()),
    ("c-blosc", "1.21.6", ("build", "link"), ()),
    ("cmake", "3.31.6", ("build",), ()),
    ("curl", "8.11.1", ("build", "link"), ()),
    ("diffutils", "3.10", ("build",), ()),
    ("eigen", "3.4.0", ("build", "link"), ()),
    ("expat", "2.6.4", ("build", "link"), ()),
    ("fftw", "3.3.10", ("build", "link"), ()),
    ("findutils", "4.10.0", ("build",), ()),
    ("gdbm", "1.23", ("build", "link"), ()),
    ("gettext", "0.23.1", ("build", "link"), ()),
    ("gmake", "4.4.1", ("build",), ()),
    ("hdf5", "1.14.5", ("build", "link"), ()),
    ("hwloc", "2.11.1", ("build", "link"), ()),
    ("krb5", "1.21.3", ("build", "link"), ()),
    ("libedit", "3.1-20240808", ("build", "link"), ()),
    ("libevent", "2.1.12", ("build", "link"), ()),
    ("libffi", "3.4.6", ("build", "link"), ()),
    ("libiconv", "1.17", ("build", "link"), ("iconv",)),
    ("libpciaccess", "0.17", ("build", "link"), ()),
    ("libsigsegv", "2.14", ("build", "link"), ()),
    ("libtool", "2.4.7", ("build",), ()),
    ("libxml2", "2.13.5", ("build", "link"), ()),
    ("lz4", "1.10.0", ("build", "link"), ()),
    ("m4", "1.4.19", ("build",), ()),
    ("mpich", "4.2.3", ("build", "link"), ("mpi",)),
    ("ncurses", "6.5", ("build", "link"), ()),
    ("ninja", "1.12.1", ("build",), ()),
    ("nghttp2", "1.64.0", ("build", "link"), ()),
    ("numactl", "2.0.18", ("build", "link"), ()),
    ("openblas", "0.3.29", ("build", "link"), ("blas", "lapack")),
    ("openssl", "3.4.1", ("build", "link"), ()),
    ("perl", "5.40.0", ("build", "run"), ()),
    ("pigz", "2.8", ("build",), ()),
    ("pkgconf", "2.3.0", ("build",), ("pkgconfig",)),
    ("py-pip", "24.3.1", ("build",), ()),
    ("py-setuptools", "75.8.0", ("build",), ()),
    ("py-wheel", "0.45.1", ("build",), ()),
    ("readline", "8.2", ("build", "link"), ()),
    ("snappy", "1.2.1", ("build", "link"), ()),
    ("sqlite", "3.46.0", ("build", "link"), ()),
    ("tar", "1.35", ("build",), ()),
    ("texinfo", "7.1", ("build",), ()),
    ("util-linux-uuid", "2.40.2", ("build", "link"), ("uuid",)),
    ("xz", "5.6.3", ("build", "link"), ()),
    ("yaml-cpp", "0.8.0", ("build", "link"), ()),
    ("zlib-ng", "2.2.3", ("build", "link"), ("zlib-api",)),
    ("zstd", "1.5.6", ("build", "link"), ()),
)


@functools.cache
def package_dependencies(name: str) -> tuple[int, ...]:
    """Indexes into ``_DEPENDENCIES`` of the extra dependencies of package ``name`` (2-20)."""
    rng = random.Random(f"deps:{name}")
    chosen = rng.sample(range(len(_DEPENDENCIES)), rng.randint(2, 20))
    return tuple(i for i in sorted(chosen) if _DEPENDENCIES[i][0] != name)


class _DepsBuilder(_IndexBuilder):
    """synth's index builder, plus each package's extra dependency edges.

    Uses synth's private ``_IndexBuilder._edges``/``_dep`` and ``_Edge``: if synth changes them,
    this module fails to import or to generate rather than silently producing other mirrors.
    """

    def __init__(self, db_version: int, spelling: str = "") -> None:
        super().__init__(db_version, spelling)
        self._dep_memo: dict[tuple[object, ...], str] = {}

    def _dep(self, spec: SynthSpec, name: str, version: str, external: bool = False) -> str:
        # synth hashes a JSON key on every call; ~17 edges per spec make that the slowest part.
        # Targets are shared objects (module constants), so their identity is a safe key.
        target = spec.target if isinstance(spec.target, str) else id(spec.target)
        key = (name, version, external, spec.platform, spec.os, target, spec.compiler)
        found = self._dep_memo.get(key)
        if found is None:
            found = self._dep_memo[key] = super()._dep(spec, name, version, external)
        return found

    def _edges(self, spec: SynthSpec) -> list[_Edge]:
        edges = super()._edges(spec)
        for index in package_dependencies(spec.name):
            name, version, deptypes, virtuals = _DEPENDENCIES[index]
            edges.append(_Edge(name, self._dep(spec, name, version), deptypes, virtuals))
        return sorted(edges, key=lambda e: e.name)


@dataclass(frozen=True)
class MirrorParams:
    """What a generated mirror depends on; equal parameters give byte-identical mirrors."""

    records: int = 60_000
    stacks: int = 30
    refs: int = 1
    db: str = "8"  # "6", "7", "8", "9" or "mixed"
    layout: str = "v2"
    seed: int = 2025
    #: "" (each ref its own specs), "nightly" (develop a night later, see :func:`nightly_specs`)
    #: or "chain" (each ref shares 95% of its specs with the one before, see
    #: :func:`chained_refs`).
    change: str = ""
    #: v3: each ref's top-level cache holds a spec manifest and its two blobs for every spec
    #: (:func:`bench.synth.write_binaries`), as ``spack buildcache push`` leaves them.
    binaries: bool = False

    def __post_init__(self) -> None:
        if self.records < 1 or self.refs < 1 or self.stacks < 0:
            raise ValueError("records and refs must be >= 1, stacks >= 0")
        if self.db not in ("6", "7", "8", "9", "mixed"):
            raise ValueError(f"db must be 6, 7, 8, 9 or mixed, not {self.db!r}")
        if self.layout not in ("v2", "v3"):
            raise ValueError(f"layout must be v2 or v3, not {self.layout!r}")
        if self.change not in ("", "nightly", "chain"):
            raise ValueError(f"change must be nightly or chain, not {self.change!r}")
        if self.change == "nightly" and self.refs != 1:
            raise ValueError("a nightly mirror has one ref, develop")
        if self.binaries and self.layout != "v3":
            raise ValueError("spec manifests are a v3 cache's")

    @property
    def key(self) -> str:
        """A folder name naming these parameters (and the generator version)."""
        return (
            f"r{self.records}-s{self.stacks}-n{self.refs}-db{self.db}-{self.layout}"
            f"-seed{self.seed}{'-' + self.change if self.change else ''}"
            f"{'-bin' if self.binaries else ''}-g{GENERATOR_VERSION}"
        )

    def db_of(self, index: int) -> int:
        """The Database version of ref number ``index``."""
        return (8, 7, 6)[index % 3] if self.db == "mixed" else int(self.db)


@dataclass(frozen=True)
class IndexFile:
    """One generated index file."""

    ref: str
    label: str
    path: str  # relative to the mirror folder
    bytes: int
    records: int
    in_buildcache: int


@dataclass(frozen=True)
class Generated:
    """A generated mirror: where it is, what it holds, how long it took."""

    root: Path
    params: MirrorParams
    refs: tuple[str, ...]
    files: tuple[IndexFile, ...]
    seconds: float
    cached: bool = False

    @property
    def total_bytes(self) -> int:
        """Bytes of every index file."""
        return sum(f.bytes for f in self.files)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able description (also the cache marker's content)."""
        return {
            "generator_version": GENERATOR_VERSION,
            "params": dataclasses.asdict(self.params),
            "refs": list(self.refs),
            "files": [dataclasses.asdict(f) for f in self.files],
            "seconds": round(self.seconds, 3),
        }

    @classmethod
    def from_json(cls, root: Path, data: dict[str, Any]) -> Generated:
        """Read back :meth:`to_json` (a cached mirror)."""
        return cls(
            root=root,
            params=MirrorParams(**data["params"]),
            refs=tuple(data["refs"]),
            files=tuple(IndexFile(**f) for f in data["files"]),
            seconds=float(data["seconds"]),
            cached=True,
        )


def stack_names(count: int) -> list[str]:
    """The ``count`` stack labels, biggest first."""
    names = list(STACK_NAMES[:count])
    names += [f"stack-{i:02d}" for i in range(len(names), count)]
    return names


def ref_names(params: MirrorParams) -> list[str]:
    """The names of the refs, in order (see the module docstring)."""
    names: list[str] = []
    snapshot = datetime.date(2025, 6, 1)
    for index in range(params.refs):
        db = params.db_of(index)
        if index == 0:
            names.append("develop")
        elif db >= 8:
            names.append(f"develop-{snapshot - datetime.timedelta(weeks=index):%Y-%m-%d}")
        else:
            names.append(f"v0.{23 if db == 7 else 21}.{index}")
    return names


def _schema(seed: int, name: str, taken: set[str]) -> list[tuple[str, tuple[Any, ...]]]:
    """A package's extra variants and their possible values (deterministic per package)."""
    rng = random.Random(f"{seed}:schema:{name}")
    wanted = rng.randint(6, 34) - len(taken)
    pool: list[tuple[str, tuple[Any, ...]]] = [(v, (True, False)) for v in _BOOL_VARIANTS]
    pool += list(_STRING_VARIANTS) + list(_LIST_VARIANTS)
    pool = [item for item in pool if item[0] not in taken]
    chosen = rng.sample(pool, max(0, min(wanted, len(pool))))
    # Booleans get a package-specific bias: most specs of a package agree on a variant.
    return [(key, values if rng.random() < 0.5 else values[::-1]) for key, values in chosen]


def _family(spec: SynthSpec) -> str:
    if spec.platform == "darwin":
        return "apple"
    target = spec.target if isinstance(spec.target, str) else str(spec.target.get("name"))
    return "arm" if target in ("aarch64", "neoverse_v1") else "x86"


def _pick_stacks(rng: random.Random, labels: Sequence[str], weights: Sequence[float]) -> list[str]:
    """1-4 distinct labels, weighted (Efraimidis-Spirakis sampling without replacement)."""
    if not labels:
        return []
    count = min(rng.randint(1, 4), len(labels))
    keys = sorted(
        ((rng.random() ** (1.0 / w), label) for label, w in zip(labels, weights, strict=True))
    )
    return sorted(label for _, label in keys[-count:])


def realistic_specs(seed: int, records: int, stacks: Sequence[str], db: int) -> list[SynthSpec]:
    """Exactly ``records`` enriched specs (see the module docstring)."""
    per_package = (4, 40)
    n_packages = math.ceil(records / (sum(per_package) / 2)) + 2
    while True:
        base = generate_specs(
            seed,
            n_packages,
            specs_per_package=per_package,
            annotation_fraction=0.05 if db >= 8 else 0.0,
        )
        if len(base) >= records:
            break
        n_packages = math.ceil(n_packages * 1.2)
    rng = random.Random(f"{seed}:enrich")
    weights = [1.0 / (i + 1) ** 0.8 for i in range(len(stacks))]
    targets: dict[str, tuple[list[str | dict[str, Any]], list[int]]] = {}
    for family, weight, target in _TARGETS:
        options, option_weights = targets.setdefault(family, ([], []))
        options.append(target)
        option_weights.append(weight)
    schemas: dict[str, list[tuple[str, tuple[Any, ...]]]] = {}
    specs: list[SynthSpec] = []
    for spec in base[:records]:
        taken = {key for key, _ in spec.variants}
        schema = schemas.get(spec.name)
        if schema is None:
            schema = schemas[spec.name] = _schema(seed, spec.name, taken)
        variants = dict(spec.variants)
        for key, values in schema:
            # The first value is the package's usual one.
            variants[key] = values[0] if rng.random() < 0.7 else rng.choice(values)
        options, option_weights = targets[_family(spec)]
        target = rng.choices(options, option_weights)[0]
        specs.append(
            dataclasses.replace(
                spec,
                target=target,
                variants=tuple(sorted(variants.items())),
                stacks=tuple(_pick_stacks(rng, stacks, weights)),
            )
        )
    return specs


#: The share of the root's specs a night replaces, and how many stacks they are in.
NIGHTLY_NEW, NIGHTLY_STACKS = 0.02, 5
#: The share of its specs a snapshot of a chain does not share with the one before it.
CHAIN_NEW = 0.05


def _fresh(seed: int, count: int, stacks: Sequence[str], db: int) -> list[SynthSpec]:
    """``count`` specs that no other seed's specs share a hash with (a night's new builds)."""
    return realistic_specs(seed, count, stacks, db)[:count] if count else []


def nightly_specs(params: MirrorParams) -> list[SynthSpec]:
    """Develop a night later: :data:`NIGHTLY_NEW` of the root's specs replaced by new ones,
    all of them (old and new) in the :data:`NIGHTLY_STACKS` biggest stacks alone, so that
    those stacks change and the others stay byte for byte as they were."""
    labels = stack_names(params.stacks)
    specs = realistic_specs(params.seed, params.records, labels, params.db_of(0))
    changed = labels[:NIGHTLY_STACKS]
    rng = random.Random(f"{params.seed}:nightly")
    movable = [i for i, spec in enumerate(specs) if set(spec.stacks) <= set(changed)]
    gone = rng.sample(movable, min(len(movable), round(params.records * NIGHTLY_NEW)))
    new = _fresh(params.seed + 7919, len(gone), changed, params.db_of(0))
    for index, spec in zip(sorted(gone), new, strict=True):
        specs[index] = spec
    return specs


def chained_refs(params: MirrorParams) -> list[list[SynthSpec]]:
    """Each ref's specs: the first's are drawn as usual, and each next one (an older
    snapshot) keeps all but :data:`CHAIN_NEW` of the specs of the one before."""
    labels = stack_names(params.stacks)
    chain = [realistic_specs(params.seed, params.records, labels, params.db_of(0))]
    for index in range(1, params.refs):
        specs = list(chain[-1])
        rng = random.Random(f"{params.seed}:chain:{index}")
        gone = rng.sample(range(len(specs)), round(len(specs) * CHAIN_NEW))
        new = _fresh(params.seed + 7919 * (index + 1), len(gone), labels, params.db_of(index))
        for at, spec in zip(sorted(gone), new, strict=True):
            specs[at] = spec
        chain.append(specs)
    return chain


def bench_refs(params: MirrorParams) -> list[SynthRef]:
    """The refs of the mirror that ``params`` describe."""
    labels = stack_names(params.stacks)
    names = ref_names(params)
    if params.change == "nightly":
        every = [nightly_specs(params)]
    elif params.change == "chain":
        every = chained_refs(params)
    else:
        every = [
            realistic_specs(params.seed + i, params.records, labels, params.db_of(i))
            for i in range(len(names))
        ]
    return [
        SynthRef(name, tuple(specs), db_version=params.db_of(i), layout=params.layout)
        for i, (name, specs) in enumerate(zip(names, every, strict=True))
    ]


def _count(data: bytes) -> tuple[int, int]:
    # synth encodes records with sorted keys and no spaces: one "in_buildcache" per record.
    return data.count(b'"in_buildcache":'), data.count(b'"in_buildcache":true')


def generate_mirror(out: Path, params: MirrorParams) -> Generated:
    """Build the mirror of ``params`` in ``out`` (created; must not exist or be empty)."""
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty")
    started = time.perf_counter()
    refs = bench_refs(params)
    original = bench.synth._IndexBuilder
    bench.synth._IndexBuilder = _DepsBuilder  # type: ignore[misc]
    try:
        discovery = build_mirror(out, refs)
    finally:
        bench.synth._IndexBuilder = original  # type: ignore[misc]
    if params.binaries:
        for ref in refs:
            write_binaries(out / ref.name, ref.specs)
    files = []
    for ref in refs:
        for entry in discovery[ref.name]:
            relative = entry["url"].removeprefix(BUCKET_PREFIX)
            data = (out / relative).read_bytes()
            records, in_cache = _count(data)
            files.append(
                IndexFile(ref.name, entry["label"], relative, len(data), records, in_cache)
            )
    seconds = time.perf_counter() - started
    return Generated(out, params, tuple(r.name for r in refs), tuple(files), seconds)


def ensure_mirror(cache: Path, params: MirrorParams) -> Generated:
    """The mirror of ``params`` under ``cache/<params.key>``, generated only if missing."""
    folder = cache / params.key
    marker = folder / MARKER
    if marker.is_file():
        return Generated.from_json(folder, json.loads(marker.read_text()))
    staging = cache / f".{params.key}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)
    staging.mkdir(parents=True)
    generated = generate_mirror(staging, params)
    (staging / MARKER).write_text(json.dumps(generated.to_json(), indent=1) + "\n")
    staging.rename(folder)
    return dataclasses.replace(generated, root=folder)


def describe(generated: Generated) -> str:
    """A human summary: one line per index file, then totals and time."""
    lines = []
    for f in generated.files:
        lines.append(
            f"  {f.ref:<20} {f.label:<36} {f.bytes / 1e6:9.1f} MB {f.records:>8,} records"
            f" ({f.in_buildcache:,} in build cache)"
        )
    how = "cached" if generated.cached else f"generated in {generated.seconds:.1f}s"
    total = generated.total_bytes
    root_bytes = sum(f.bytes for f in generated.files if f.label == "root")
    lines.append(
        f"{generated.root}: {len(generated.files)} index files, {total / 1e6:.1f} MB "
        f"(root {root_bytes / 1e6:.1f} MB, stacks {(total - root_bytes) / 1e6:.1f} MB), "
        f"{sum(f.records for f in generated.files):,} records; {how}"
    )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The mirror parameters as command-line options (shared with ``bench/run.py``)."""
    defaults = MirrorParams()
    parser.add_argument("--records", type=int, default=defaults.records, help="root specs")
    parser.add_argument("--stacks", type=int, default=defaults.stacks, help="stacks per ref")
    parser.add_argument("--refs", type=int, default=defaults.refs, help="refs in the mirror")
    parser.add_argument("--db", default=defaults.db, choices=("6", "7", "8", "9", "mixed"))
    parser.add_argument("--layout", default=defaults.layout, choices=("v2", "v3"))
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument(
        "--change",
        default=defaults.change,
        choices=("", "nightly", "chain"),
        help="nightly: develop a night later; chain: each ref shares 95%% with the one before",
    )
    parser.add_argument(
        "--binaries",
        action="store_true",
        help="v3: a spec manifest and its blobs for every spec of each ref's top-level cache",
    )


def params_from(args: argparse.Namespace) -> MirrorParams:
    """:class:`MirrorParams` from parsed :func:`add_arguments` options."""
    return MirrorParams(
        records=args.records,
        stacks=args.stacks,
        refs=args.refs,
        db=args.db,
        layout=args.layout,
        seed=args.seed,
        change=args.change,
        binaries=args.binaries,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description="Generate a synthetic benchmark mirror.")
    parser.add_argument("--out", type=Path, required=True, help="mirror folder (new or empty)")
    add_arguments(parser)
    args = parser.parse_args(argv)
    params = params_from(args)
    print(f"generating {params} into {args.out} ...", flush=True)
    generated = generate_mirror(args.out, params)
    print(describe(generated))
    return 0


if __name__ == "__main__":
    sys.exit(main())
