"""Spack's spec syntax as a query: the parser (each spelling, and a caret under the token of a
bad one), the matcher on a small index of boolean, single- and multi-valued variants, and
``crawler find`` taking the same spellings on that index, as a spec and as ``--variant``."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

import crawler
from crawler.cli import find
from crawler.consume.specsyntax import SpecQuery, VariantTerm, parse_spec, parse_variant
from crawler.consumer_errors import QueryError, SpecSyntaxError, UnknownTargetError
from crawler.documents import Index, PackageSummary, SpecDetail
from crawler.errors import ExitCode

from .conftest import Done
from .test_query import branch_of, index_of


def _spec(
    key: str, version: str, compiler: str, arch: str, variants: tuple[str, ...]
) -> SpecDetail:
    platform, os, target = arch.split("-")
    return SpecDetail(
        compiler=compiler,
        hash=key * 32,
        os=os,
        platform=platform,
        size="-",
        stacks=("root",),
        target=target,
        variants=variants,
        versions=(version,),
    )


#: The test cache: rs-base's four specs (a to d) cover a boolean (shared, debug), a
#: single-valued (build_type) and a multi-valued (features) variant, and patches.
SPECS = {
    "rs-base": [
        _spec("a", "1.1.0", "gcc@12.3.0", "linux-ubuntu22.04-x86_64_v4",
              ("build_type=Release", "~debug", "features=a,b", "+shared")),
        _spec("b", "1.2", "gcc@13.2.0", "linux-debian12-x86_64_v3",
              ("build_type=Debug", "+debug", "features=a", "~shared")),
        _spec("c", "1.10", "clang@15.0.0", "darwin-sonoma-m1",
              ("build_type=Release", "+debug", "features=b,c", "+shared")),
        _spec("d", "2.0", "llvm@18.1.0", "linux-debian12-zen3",
              ("build_type=Release", "~debug", "features=a,b,c", "patches=abcdef1", "~shared")),
    ],
    "rs-tools": [_spec("e", "0.3", "gcc@12.1.0", "linux-debian12-x86_64_v4", ("+shared",))],
    "zlib": [_spec("f", "1.3.1", "none", "linux-debian12-x86_64_v3", ())],
}  # fmt: skip


def _index() -> Index[PackageSummary]:
    return index_of(SPECS)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return branch_of(tmp_path_factory, _index())


#: Each spelling, and the specs (by the letter of their hash) that ``spack find`` answers on
#: the test cache: a concrete spec ``satisfies`` the query (see docs/consumers.md).
ANSWERS = {
    "rs-base": "abcd",
    "rs-*": "abcde",
    "*": "abcdef",
    "rs-base@1.1": "a",  # 1.1 and 1.1.x: not 1.10
    "@=1.2": "b",
    "@=1.1": "",  # exactly: 1.1.0 is another version
    "rs-base@1.2:1.10": "bc",
    "rs-base@1.2:": "bcd",
    "rs-base@:1.2": "ab",
    "rs-base@1.1,2": "ad",
    "rs-base@:": "abcd",
    "+shared": "ace",
    "rs-base ~shared": "bd",
    "rs-base -shared": "bd",
    "shared=true": "ace",
    "shared=false": "bd",
    "debug=True": "bc",
    "build_type=Release": "acd",
    "build_type=Debug": "b",
    "build_type:=Release": "acd",
    "features=a": "abd",
    "features=a,b": "ad",
    "features=b,a": "ad",
    "features:=a,b": "a",
    "features:=a": "b",
    "features=*": "abcd",
    "patches=abcdef1234": "d",
    "%gcc": "abe",
    "%gcc@12": "ae",
    "%gcc@12.3": "a",
    "%gcc@13:": "b",
    "%clang": "cd",  # Spack 1.x: clang is llvm
    "%llvm@18": "d",
    "%c=gcc@13": "b",
    "%c,c=gcc": "abe",
    "target=x86_64_v4": "ae",
    "target=x86_64_v3": "bf",  # a concrete target is compared by name
    "target=x86_64_v3:": "abdef",
    "target=:x86_64_v3": "bf",
    "target=x86_64_v3:x86_64_v4": "abef",
    "target=zen3,m1": "cd",
    "os=debian12": "bdef",
    "platform=darwin": "c",
    "arch=linux-debian12-zen3": "d",
    "arch=linux-None-x86_64_v4": "ae",
    "/aaa": "a",
    "rs-base@1.1 +shared build_type=Release target=x86_64_v4 os=ubuntu22.04 %gcc@12": "a",
}


def _letters(found: crawler.Found) -> str:
    return "".join(m.spec.hash[0] for m in found)


@pytest.mark.parametrize(("spec", "answer"), ANSWERS.items())
def test_each_spelling_finds_what_spack_finds(spec: str, answer: str) -> None:
    assert _letters(crawler.find_specs(_index(), spec)) == answer


@pytest.mark.parametrize(("spec", "answer"), ANSWERS.items())
def test_crawler_find_takes_each_spelling(
    cache: Path, capsys: pytest.CaptureFixture[str], spec: str, answer: str
) -> None:
    """As one word, or as several (Spack's words are joined with spaces; a word ``-v`` is an
    option's, as in Spack: ``~v``, or the spec in one word)."""
    words = spec.split()
    for argv in ([spec], words) if not any(w.startswith("-") for w in words) else ([spec],):
        done = _find(capsys, *argv, "--in", str(cache), "--json")
        assert done.code == (0 if answer else 10), done.err
        assert "".join(json.loads(line)["hash"][0] for line in done.out.splitlines()) == answer


def _find(capsys: pytest.CaptureFixture[str], *args: str) -> Done:
    code = find.main(list(args))
    captured = capsys.readouterr()
    return Done(code, captured.out, captured.err)


@pytest.mark.parametrize(
    ("variant", "answer"),
    [
        ("debug=true", "bc"),  # found nothing: the index writes +debug
        ("shared=false", "bd"),
        ("features:=a", "b"),  # was a usage error
        ("features=a,b", "ad"),
        ("+shared", "ac"),
        ("-shared", "bd"),
    ],
)
def test_the_variant_flag_means_what_spack_means(
    cache: Path, capsys: pytest.CaptureFixture[str], variant: str, answer: str
) -> None:
    done = _find(capsys, "rs-base", f"--variant={variant}", "--in", str(cache), "--json")
    assert done.code == 0, done.err
    assert "".join(json.loads(line)["hash"][0] for line in done.out.splitlines()) == answer
    assert _letters(crawler.find_specs(_index(), name="rs-base", variants=[variant])) == answer


def test_a_spec_and_the_flags_all_hold(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _letters(crawler.find_specs(_index(), "+shared", os="debian12")) == "e"
    assert _letters(crawler.Query("rs-base", version="1.1:", variants="+debug").run(_index())) == (
        "bc"
    )
    done = _find(capsys, "rs-base", "+shared", "--compiler", "gcc", "--in", str(cache), "--json")
    assert [json.loads(line)["hash"][0] for line in done.out.splitlines()] == ["a"]
    with pytest.raises(QueryError, match="the spec names a package already"):
        crawler.Query("rs-base", name="zlib")


def test_the_parser_gives_a_typed_query() -> None:
    query = crawler.parse_spec("rs-base@1.2: +shared ~debug features:=a,b target=zen3 %gcc@12")
    assert query == SpecQuery(
        text="rs-base@1.2: +shared ~debug features:=a,b target=zen3 %gcc@12",
        name="rs-base",
        version="1.2:",
        compilers=("gcc@12",),
        variants=(
            VariantTerm("shared", frozenset({"true"}), True, "+shared"),
            VariantTerm("debug", frozenset({"false"}), True, "~debug"),
            VariantTerm("features", frozenset({"a", "b"}), True, "features:=a,b"),
        ),
        target="zen3",
    )
    assert parse_spec("rs-base-shared").name == "rs-base-shared"  # '-' needs a space before
    assert parse_spec("x cuda_arch='70,80'").variants[0].values == {"70", "80"}
    assert parse_variant("-cuda") == VariantTerm("cuda", frozenset({"false"}), True, "-cuda")


@pytest.mark.parametrize(
    ("spec", "caret", "says"),
    [
        ("rs-base ^zlib", "        ^", "dependencies (^, %%, edge attributes) are not in"),
        ("rs-base %[virtuals=c] gcc", "        ^^", "dependencies"),
        ("rs-base @", "        ^", "@ is followed by a version"),
        ("rs-base@1.4:1.2", "       ^^^^^^^^", "is empty: its upper bound is below its lower"),
        ("rs-base@1.2 @1.3", "            ^^^^", "a spec has one version"),
        ("rs-base zlib", "        ^^^^", "a second name: give one spec at a time"),
        ("rs-base +shared ~shared", "                ^^^^^^^", "variant 'shared' is given twice"),
        ("rs-base ++shared", "        ^^^^^^^^", "propagation"),
        ("rs-base cflags=-O3", "        ^^^^^^^^^^", "compiler flags are not in the index"),
        ("builtin.zlib", "^^^^^^^^^^^^", "the index has no namespaces"),
        ("rs-base arch=linux-zen3", "        ^^^^^^^^^^^^^^^", "arch= is platform-os-target"),
        ("rs-base os=a os=b", "             ^^^^", "a spec has one os"),
        ("rs-base %", "        ^", "% is followed by a compiler's name"),
        ("rs-base %mpi=openmpi", "        ^^^^^", "the index knows a spec's compiler"),
        ("rs-base %gcc@12 +shared", "                ^^^^^^^", "describes the compiler"),
        ("rs-base %gcc zlib", "             ^^^^", "a second spec"),
        # The index keeps one compiler of a spec (c's provider, else cxx's, else fortran's):
        # Spack would look at each language's, so these would find what Spack does not.
        ("rs-base %cxx=gcc", "        ^^^^^", "one compiler per spec, the provider of its c"),
        ("rs-base %fortran=gcc", "        ^^^^^^^^^", "ask %c=name or %name"),
        ("rs-base %c,cxx=gcc", "        ^^^^^^^", "ask %c=name or %name"),
        ("rs-base %gcc %llvm", "             ^", "one compiler per spec, the provider of its c"),
        ("rs-base %gcc %c=gcc", "             ^^^", "give one %compiler"),
        # Spack's grammar is [name] [options]: a name after an option starts another spec.
        ("+shared rs-base", "        ^^^^^^^", "a second spec: give one spec at a time"),
        ("@1.2 zlib", "     ^^^^", "a second spec: give one spec at a time"),
        ("target=zen3 zlib", "            ^^^^", "a second spec: give one spec at a time"),
        ("/aaa zlib", "     ^^^^", "a second spec: give one spec at a time"),
        ("rs-base features:=", "        ^^^^^^^^^^", "a value follows ="),
        ("rs-base !", "        ^", "unexpected here"),
    ],
)
def test_a_bad_spec_is_an_error_with_a_caret_under_its_token(
    spec: str, caret: str, says: str
) -> None:
    with pytest.raises(SpecSyntaxError) as caught:
        crawler.find_specs(_index(), spec)
    assert says in str(caught.value)
    assert str(caught.value).splitlines()[1:] == [spec, caret]
    assert caught.value.exit_code == ExitCode.USAGE
    assert pickle.loads(pickle.dumps(caught.value)).args == caught.value.args


def test_crawler_find_shows_the_caret(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    done = _find(capsys, "rs-base", "^zlib", "--in", str(cache))
    assert done.code == 2 and done.out == ""
    assert done.err.splitlines()[1:] == ["rs-base ^zlib", "        ^"]
    assert done.err.startswith("error: bad spec (column 9): dependencies")
    bad = _find(capsys, "rs-base", "--variant", "+shared +debug", "--in", str(cache))
    assert bad.code == 2 and "bad variant '+shared +debug'" in bad.err


def test_a_range_of_targets_names_the_unknown_bound() -> None:
    with pytest.raises(UnknownTargetError, match="zen99"):
        crawler.find_specs(_index(), "target=zen99:")


def test_the_caret_stays_under_a_token_shown_escaped() -> None:
    with pytest.raises(SpecSyntaxError) as caught:
        crawler.parse_spec("zlib \x1b[2J +shared")
    shown, caret = str(caught.value).splitlines()[1:]
    assert "\x1b" not in shown and shown.startswith("zlib ")
    assert caret == " " * 5 + "^" * (shown.index("[2J") - 5)
