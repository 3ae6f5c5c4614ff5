"""Mirrors in S3 (``s3://<bucket>/<prefix>``), read through the S3 API against a real
S3-compatible server on loopback: moto's server mode, started once for the session. Nothing
here mocks the client; the error mapping of throttling, which moto does not answer, is tested
with botocore's own ``ClientError`` built from an answer as S3 sends it.

The tests never read the machine's AWS settings: the environment's ``AWS_*`` variables are
cleared, its files pointed at nothing, and the credentials are in variables named in the
config, as a user gives them.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from aiobotocore.session import AioSession, ClientCreatorContext
from botocore.exceptions import ClientError

from crawler.cli.command import main_async
from crawler.config import Config
from crawler.config.checks import build_config
from crawler.errors import ConfigError, FetchError, HTTPStatusError, NotFoundError
from crawler.mirror.fetch import Fetcher
from crawler.mirror.retry import is_transient
from crawler.mirror.s3 import S3Transport
from crawler.mirror.s3errors import S3ConnectionError, s3_failure

from .conftest import SAMPLE_MIRROR, SleepRecorder, fast_config, mirror_neutral, tree_bytes

if TYPE_CHECKING:
    from types_aiobotocore_s3 import S3Client

KEY_ID, SECRET = "AKIDCRAWLERTEST00001", "s3cr3t/KeyThat+MustNeverBeShown0123456789"
CREDENTIALS = {
    "access_key_id_variable": "MIRROR_KEY_ID",
    "secret_access_key_variable": "MIRROR_SECRET",
}
_names = itertools.count()


@pytest.fixture(autouse=True)
def _aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No AWS settings of this machine, and no instance metadata lookups (slow, off AWS)."""
    import os

    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("MIRROR_KEY_ID", KEY_ID)
    monkeypatch.setenv("MIRROR_SECRET", SECRET)


def s3_settings(endpoint: str, **extra: object) -> dict[str, object]:
    return {"endpoint_url": endpoint, "region": "us-east-1", **CREDENTIALS, **extra}


async def make_bucket(endpoint: str, root: Path | None = None, prefix: str = "") -> str:
    """A new bucket, holding the files under ``root`` at ``prefix``, readable by anyone (as
    a public mirror is); its name."""
    name = f"crawler-test-{next(_names)}"
    async with _client(endpoint) as client:
        await client.create_bucket(Bucket=name)
    if root is not None:
        await put_tree(endpoint, name, root, prefix)
    return name


async def put_tree(endpoint: str, bucket: str, root: Path, prefix: str = "") -> None:
    """Put every file under ``root`` into ``bucket`` at ``prefix``, readable by anyone, over
    what is there (as a second ``spack buildcache push`` into the bucket does)."""
    files = [p for p in sorted(root.rglob("*")) if p.is_file()]
    async with _client(endpoint) as client:
        await asyncio.gather(
            *(
                client.put_object(
                    Bucket=bucket,
                    Key=prefix + path.relative_to(root).as_posix(),
                    Body=path.read_bytes(),
                    ACL="public-read",
                )
                for path in files
            )
        )


def _client(endpoint: str) -> ClientCreatorContext[S3Client]:
    return AioSession().create_client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
    )


@pytest.fixture(scope="session")
def sample_bucket(moto_endpoint: str) -> str:
    """The sample mirror in a bucket, at ``spack/``, for the tests that only read it."""
    return asyncio.run(make_bucket(moto_endpoint, SAMPLE_MIRROR, prefix="spack/"))


def write_config(path: Path, settings: dict[str, object]) -> Path:
    path.write_text(yaml.safe_dump(settings))
    return path


def config_for(endpoint: str, mirror: str, **s3: object) -> Config:
    settings = fast_config(mirror, Path("out"), s3=s3_settings(endpoint, **s3))
    return build_config(settings)


# --- a whole sync -------------------------------------------------------------------------


async def test_a_mirror_in_s3_publishes_what_the_same_mirror_in_a_folder_does(
    moto_endpoint: str, sample_bucket: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mirror = f"s3://{sample_bucket}/spack"
    config = write_config(
        tmp_path / "crawler.yaml",
        fast_config(mirror, tmp_path / "s3-out", s3=s3_settings(moto_endpoint)),
    )
    sync = ["sync", "--config", str(config), "--branch", "develop", "-v"]
    assert await main_async(sync) == 0
    local = ["sync", "--mirror", str(SAMPLE_MIRROR), "--output", str(tmp_path / "local-out")]
    assert await main_async([*local, "--branch", "develop", "--config", str(config)]) == 0

    from_s3 = mirror_neutral(tmp_path / "s3-out" / "develop" / "index.json", mirror)
    local_out = tmp_path / "local-out" / "develop" / "index.json"
    from_folder = mirror_neutral(local_out, SAMPLE_MIRROR.as_uri())
    assert from_s3 == from_folder  # the same specs, stacks and source URLs, in the same order

    # A second run asks again with the ETag (IfNoneMatch) or HEAD: nothing changed.
    assert await main_async(sync) == 6
    printed = "".join(capsys.readouterr())
    assert SECRET not in printed and KEY_ID not in printed
    written = b"".join(tree_bytes(tmp_path / "s3-out").values())
    assert SECRET.encode() not in written and KEY_ID.encode() not in written


async def test_a_stack_whose_key_is_missing_is_reported_missing(
    moto_endpoint: str, sample_bucket: str, tmp_path: Path
) -> None:
    bucket = f"{sample_bucket}/spack"
    config = config_for(moto_endpoint, f"s3://{bucket}")
    async with Fetcher(config) as fetcher:
        present = f"s3://{bucket}/develop/build_cache/index.json"
        missing = f"s3://{bucket}/develop/nothing/index.json"
        assert await fetcher.confirmed(present) is False  # v3 develop: no v2 index there
        with pytest.raises(NotFoundError) as found:
            await fetcher.read(missing)
        assert str(found.value) == f"cannot fetch {missing}: NoSuchKey: no such key"
        assert await fetcher.present(missing, 5) is False
        assert await fetcher.confirmed(missing) is False
        with pytest.raises(NotFoundError):
            await fetcher.probe(missing)


async def test_a_dry_run_of_a_mirror_in_s3_writes_nothing(
    moto_endpoint: str, sample_bucket: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--dry-run`` over S3: blobs whose summary is cached are confirmed by ``HeadObject``, the
    rest asked for with ``IfNoneMatch``; nothing is written (see tests/test_dry_run.py)."""
    settings = fast_config(f"s3://{sample_bucket}/spack", tmp_path / "out")
    config = write_config(tmp_path / "crawler.yaml", {**settings, "s3": s3_settings(moto_endpoint)})
    sync = ["sync", "--config", str(config), "--branch", "develop", "--branch", "v0.23.1"]
    assert await main_async([*sync, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "develop: would be published (first publish)\n  root: would download 59,305 bytes" in out
    assert not (tmp_path / "out").exists()

    assert await main_async([*sync, "-q"]) == 0
    before = tree_bytes(tmp_path / "out")
    capsys.readouterr()
    assert await main_async([*sync, "--dry-run"]) == 6
    out = capsys.readouterr().out
    assert (
        "develop: unchanged (output is current)\n"
        "  root: unchanged (its blob's checksum names cached bytes)" in out
    )
    assert "v0.23.1: skipped (immutable and published)" in out
    assert tree_bytes(tmp_path / "out") == before


# --- the transport's operations ----------------------------------------------------------


async def test_download_hashes_and_a_second_one_with_the_etag_is_not_modified(
    moto_endpoint: str, sample_bucket: str, tmp_path: Path
) -> None:
    bucket = f"{sample_bucket}/spack"
    config = config_for(moto_endpoint, f"s3://{bucket}")
    index = "develop-2025-04-20/build_cache/index.json"
    location = f"s3://{bucket}/{index}"
    async with Fetcher(config) as fetcher:
        first = await fetcher.download(location, tmp_path / "a")
        import hashlib

        expected = (SAMPLE_MIRROR / index).read_bytes()
        assert first.path is not None and first.path.read_bytes() == expected
        assert first.sha256 == hashlib.sha256(expected).hexdigest()
        assert first.etag and first.attempts == 1 and first.encoding is None
        again = await fetcher.download(location, tmp_path / "b", etag=first.etag)
        assert again.not_modified and not (tmp_path / "b").exists()
        assert await fetcher.present(location, 5) is True
        assert await fetcher.confirmed(location) is True
        # A dry run's probe: the same GetObject, its body closed unread.
        probed = await fetcher.probe(location)
        assert (probed.not_modified, probed.size, probed.etag) == (False, len(expected), first.etag)
        assert (await fetcher.probe(location, first.etag)).not_modified


async def test_an_index_larger_than_the_limit_fails_unread(
    moto_endpoint: str, sample_bucket: str, tmp_path: Path
) -> None:
    bucket = f"{sample_bucket}/spack"
    config = config_for(moto_endpoint, f"s3://{bucket}")
    location = f"s3://{bucket}/cache_spack_io_index.json"
    transport = S3Transport(config, Fetcher(config).policy)
    await transport.open()
    try:
        with pytest.raises(FetchError, match=r"larger than the limit \(1 KiB\): \d[\d,]* bytes"):
            await transport.read(location, 1024, "the limit")
        with pytest.raises(FetchError, match="larger than max_index_mb"):
            await transport.download(
                location, tmp_path / "x", 100, etag=None, progress=None, stored=False
            )
    finally:
        await transport.close()


async def test_a_folder_is_listed_with_a_delimiter(moto_endpoint: str, sample_bucket: str) -> None:
    bucket = f"{sample_bucket}/spack"
    config = config_for(moto_endpoint, f"s3://{bucket}")
    async with Fetcher(config) as fetcher:
        top = await fetcher.listdir(f"s3://{bucket}")
        assert top == sorted(p.name for p in SAMPLE_MIRROR.iterdir())
        stacks = await fetcher.listdir(f"s3://{bucket}/v0.23.1/")
        assert stacks == sorted(p.name for p in (SAMPLE_MIRROR / "v0.23.1").iterdir())
        assert await fetcher.listdir(f"s3://{bucket}/no-such-folder") == []


async def test_a_listing_past_the_limit_fails(moto_endpoint: str, sample_bucket: str) -> None:
    bucket = f"{sample_bucket}/spack"
    config = config_for(moto_endpoint, f"s3://{bucket}")
    transport = S3Transport(config, Fetcher(config).policy)
    transport.list_limit = 2  # a hook: 10,000 keys would take moto long to make
    await transport.open()
    try:
        with pytest.raises(FetchError, match="lists more than 2 entries"):
            await transport.listdir(f"s3://{bucket}")
    finally:
        await transport.close()


# --- failures ----------------------------------------------------------------------------


async def test_a_bucket_that_is_not_there_makes_the_mirror_unusable(
    moto_endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = fast_config("s3://no-such-bucket/x", tmp_path / "o", s3=s3_settings(moto_endpoint))
    config = write_config(tmp_path / "c.yaml", settings)
    assert await main_async(["sync", "--config", str(config), "--branch", "develop"]) == 3
    err = capsys.readouterr().err
    assert (
        "cannot fetch s3://no-such-bucket/x/cache_spack_io_index.json: HTTP 404 NoSuchBucket" in err
    )
    assert "no bucket 'no-such-bucket' at this endpoint" in err
    assert not (tmp_path / "o" / "develop").exists()


async def test_a_wrong_endpoint_is_retried_then_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    closed = "http://127.0.0.1:9"  # discard: nothing listens there
    settings = fast_config("s3://bucket", tmp_path / "o", s3=s3_settings(closed))
    config = write_config(tmp_path / "c.yaml", settings)
    sleep = SleepRecorder()
    argv = ["sync", "--config", str(config), "--branch", "develop"]
    assert await main_async(argv, sleep=sleep) == 3
    err = capsys.readouterr().err
    assert "cannot fetch s3://bucket/cache_spack_io_index.json: Could not connect to the " in err
    assert closed in err and "after 3 attempts" in err
    assert len(sleep.waits) == 2


async def test_anonymous_access_sends_no_credentials(
    moto_endpoint: str, sample_bucket: str
) -> None:
    """moto answers unsigned requests as a public bucket does."""
    bucket = f"{sample_bucket}/spack"
    config = build_config(
        fast_config(
            f"s3://{bucket}",
            Path("o"),
            s3={"endpoint_url": moto_endpoint, "region": "us-east-1", "anonymous": True},
        )
    )
    async with Fetcher(config) as fetcher:
        body = await fetcher.read(f"s3://{bucket}/cache_spack_io_index.json")
    assert body == (SAMPLE_MIRROR / "cache_spack_io_index.json").read_bytes()


async def test_a_credentials_variable_that_is_not_set_is_a_config_error(
    moto_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MIRROR_SECRET")
    settings = fast_config("s3://bucket", tmp_path / "o", s3=s3_settings(moto_endpoint))
    config = write_config(tmp_path / "c.yaml", settings)
    with pytest.raises(ConfigError) as raised:
        async with Fetcher(build_config(settings, str(config))):
            pass
    assert str(raised.value) == (
        f"config error in {config}: key 's3.secret_access_key_variable': the environment "
        "variable MIRROR_SECRET is not set"
    )
    assert await main_async(["sync", "--config", str(config), "--branch", "develop"]) == 2


async def test_a_profile_that_is_not_there_is_a_config_error(moto_endpoint: str) -> None:
    settings = fast_config(
        "s3://b", Path("o"), s3={"endpoint_url": moto_endpoint, "profile": "nobody"}
    )
    with pytest.raises(ConfigError, match=r"key 's3.profile': The config profile \(nobody\)"):
        async with Fetcher(build_config(settings, "c.yaml")):
            pass


async def test_a_profile_gives_its_credentials(
    moto_endpoint: str, sample_bucket: str, tmp_path: Path
) -> None:
    (tmp_path / "aws-credentials").write_text(
        f"[mirror]\naws_access_key_id = {KEY_ID}\naws_secret_access_key = {SECRET}\n"
    )
    bucket = f"{sample_bucket}/spack"
    s3 = {"endpoint_url": moto_endpoint, "region": "us-east-1", "profile": "mirror"}
    async with Fetcher(build_config(fast_config(f"s3://{bucket}", Path("o"), s3=s3))) as fetcher:
        assert await fetcher.confirmed(f"s3://{bucket}/cache_spack_io_index.json")


# --- what each S3 answer becomes --------------------------------------------------------


def s3_answer(code: str, status: int, message: str = "") -> ClientError:
    """botocore's error for an S3 answer, as its parser builds it."""
    response = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status, "HTTPHeaders": {}},
    }
    return ClientError(response, "GetObject")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("code", "status", "effective"),
    [
        ("SlowDown", 503, 503),
        ("InternalError", 500, 500),
        ("ServiceUnavailable", 503, 503),
        ("RequestTimeout", 400, 503),  # S3 sends 400 with it: retried all the same
        ("Throttling", 400, 503),
    ],
)
def test_throttling_and_passing_faults_are_transient(
    code: str, status: int, effective: int
) -> None:
    failure = s3_failure("s3://b/k", s3_answer(code, status, "Please reduce your request rate."))
    assert isinstance(failure, HTTPStatusError) and is_transient(failure)
    assert failure.status == effective
    assert str(failure) == (
        f"cannot fetch s3://b/k: HTTP {status} {code}: Please reduce your request rate."
    )


@pytest.mark.parametrize(
    "code", ["AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken"]
)
def test_refused_credentials_are_final_and_say_what_to_check(code: str) -> None:
    failure = s3_failure("s3://b/k", s3_answer(code, 403, "Access Denied"))
    assert isinstance(failure, HTTPStatusError) and not is_transient(failure)
    assert str(failure) == (
        f"cannot fetch s3://b/k: HTTP 403 {code}: Access Denied (check the credentials the "
        "config's s3 section names, or s3.anonymous for a public bucket)"
    )


def test_a_missing_key_is_a_404_and_a_missing_bucket_is_not() -> None:
    missing = s3_failure("s3://b/k", s3_answer("NoSuchKey", 404))
    assert isinstance(missing, NotFoundError)
    bucket = s3_failure("s3://b/k", s3_answer("NoSuchBucket", 404, "no bucket"))
    assert isinstance(bucket, HTTPStatusError) and not isinstance(bucket, NotFoundError)
    assert not is_transient(bucket)


def test_a_connection_error_is_transient() -> None:
    from botocore.exceptions import EndpointConnectionError

    failure = s3_failure("s3://b/k", EndpointConnectionError(endpoint_url="http://h:1/b/k"))
    assert isinstance(failure, S3ConnectionError) and is_transient(failure)
    assert str(failure) == 'Could not connect to the endpoint URL: "http://h:1/b/k"'


# --- the config -------------------------------------------------------------------------


def test_an_s3_mirror_and_its_section_are_read() -> None:
    config = build_config(
        {"mirror": "s3://bucket/some/prefix", "s3": {**CREDENTIALS, "addressing_style": "path"}}
    )
    assert config.mirror == "s3://bucket/some/prefix"
    assert config.s3.access_key_id_variable == "MIRROR_KEY_ID"
    assert build_config({"s3": None}).s3 == build_config({}).s3  # all commented out


@pytest.mark.parametrize(
    ("settings", "key", "reason"),
    [
        ({"mirror": "s3://"}, "mirror", "'s3://' names no bucket (s3://<bucket>/<prefix>)"),
        ({"mirror": "s3:///x"}, "mirror", "'s3:///x' names no bucket"),
        ({"mirror": "s3://b/x?versionId=1"}, "mirror", "has a query or fragment"),
        ({"mirror": "s3://a b/x"}, "mirror", "'a b' is not a bucket name"),
        ({"mirror": "s3://k:s@b/x"}, "mirror", "'s3://…@b/x' holds credentials: credentials go"),
        (
            {"s3": {"endpoint_url": "ftp://h"}},
            "s3.endpoint_url",
            "'ftp://h' is not an http or https URL",
        ),
        (
            {"s3": {"endpoint_url": "http://k:s@h"}},
            "s3.endpoint_url",
            "'http://…@h' holds credentials",
        ),
        ({"s3": {"endpoint_url": "http://"}}, "s3.endpoint_url", "'http://' names no host"),
        (
            {"s3": {"access_key_id_variable": "K"}},
            "s3.access_key_id_variable",
            "given without s3.secret_access_key_variable",
        ),
        (
            {"s3": {"session_token_variable": "T"}},
            "s3.session_token_variable",
            "a session token goes with",
        ),
        ({"s3": {**CREDENTIALS, "profile": "p"}}, "s3.profile", "not both"),
        ({"s3": {"profile": "p", "anonymous": True}}, "s3.anonymous", "sends no credentials"),
        (
            {"s3": {"addressing_style": "dns"}},
            "s3.addressing_style",
            "'dns' is not one of the valid values: auto, path, virtual",
        ),
        ({"s3": {"access_key": "K"}}, "s3.access_key", "unknown key"),
    ],
)
def test_bad_s3_settings_are_named(settings: dict[str, object], key: str, reason: str) -> None:
    with pytest.raises(ConfigError) as raised:
        build_config(settings, "c.yaml")
    assert raised.value.key == key
    assert reason in raised.value.reason


def test_a_mistyped_s3_url_is_no_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"looks like a mistyped URL: 's3://bucket'\?"):
        build_config({"mirror": "s3:/bucket"}, "c.yaml", base=tmp_path)


def test_a_secret_given_where_a_variable_name_goes_is_not_shown() -> None:
    with pytest.raises(ConfigError) as raised:
        build_config(
            {"s3": {"access_key_id_variable": KEY_ID, "secret_access_key_variable": SECRET}}
        )
    assert raised.value.key == "s3.secret_access_key_variable"
    assert SECRET not in str(raised.value)


def test_an_s3_url_is_no_s3_mirror_unless_the_mirror_is_one() -> None:
    """s3:// source URLs keep mapping onto an http(s) mirror (the public mirror's case)."""
    from crawler.mirror.discovery import Mirror, map_url

    url = "s3://spack-binaries/develop/build_cache/index.json"
    http = build_config({"mirror": "https://binaries.spack.io"})
    assert map_url(url, Mirror.parse(http.mirror), http) == (
        "https://binaries.spack.io/develop/build_cache/index.json"
    )
    own = build_config({"mirror": "s3://spack-binaries"})
    assert map_url(url, Mirror.parse(own.mirror), own) == url
    prefixed = build_config({"mirror": "s3://bucket/spack"})
    mirror = Mirror.parse(prefixed.mirror)
    on_it = "s3://bucket/spack/develop/build_cache/index.json"
    assert map_url(on_it, mirror, prefixed) == on_it  # read as it is
    assert map_url(url, mirror, prefixed) == on_it  # another bucket's path: onto the mirror
    assert not mirror.contains("s3://bucket/spack/../other/index.json")
    assert not mirror.contains("s3://bucket/spackle/index.json")
    assert not mirror.contains("s3://other/spack/index.json")
    with pytest.raises(ValueError, match="leads out of the mirror"):
        map_url("s3://x/../../other/index.json", mirror, prefixed)


async def test_an_s3_location_without_an_s3_mirror_is_refused(tmp_path: Path) -> None:
    config = build_config(fast_config(str(tmp_path), tmp_path / "o"))
    async with Fetcher(config) as fetcher:
        with pytest.raises(FetchError, match="read for a mirror given as s3:// alone"):
            await fetcher.read("s3://b/k")
    await asyncio.sleep(0)


@pytest.fixture
def enforced(moto_endpoint: str) -> Iterator[tuple[str, str]]:
    """moto checking signatures and IAM policies (off by default) for one test: the keys of a
    user allowed to read S3."""
    import urllib.request

    from botocore.session import get_session

    iam: Any = get_session().create_client(
        "iam",
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
    )
    name = f"reader-{next(_names)}"
    iam.create_user(UserName=name)
    policy = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
    }
    iam.put_user_policy(UserName=name, PolicyName="read", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName=name)["AccessKey"]

    def auth(count: str) -> None:
        request = urllib.request.Request(
            f"{moto_endpoint}/moto-api/reset-auth",
            data=count.encode(),
            method="POST",
            headers={"Content-Type": "text/plain"},  # else werkzeug takes it for a form
        )
        with urllib.request.urlopen(request, timeout=5) as answer:
            assert answer.status == 200

    auth("0")
    try:
        yield key["AccessKeyId"], key["SecretAccessKey"]
    finally:
        auth("inf")


@pytest.mark.slow  # IAM set up, and a client made three times: about two seconds
async def test_wrong_credentials_are_refused_and_named(
    moto_endpoint: str,
    sample_bucket: str,
    enforced: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key_id, secret = enforced
    config = config_for(moto_endpoint, f"s3://{sample_bucket}/spack")
    location = f"s3://{sample_bucket}/spack/cache_spack_io_index.json"
    monkeypatch.setenv("MIRROR_KEY_ID", key_id)
    monkeypatch.setenv("MIRROR_SECRET", secret)
    async with Fetcher(config) as fetcher:
        assert await fetcher.read(location)
    for given, code in ((secret[::-1], "SignatureDoesNotMatch"), (None, "InvalidAccessKeyId")):
        monkeypatch.setenv("MIRROR_SECRET", given or secret)
        monkeypatch.setenv("MIRROR_KEY_ID", key_id if given else "AKIDNOBODYKNOWS00000")
        async with Fetcher(config) as fetcher:
            with pytest.raises(HTTPStatusError) as refused:
                await fetcher.read(location)
        assert refused.value.status == 403 and refused.value.attempts == 1
        assert f"HTTP 403 {code}" in str(refused.value)
        assert "check the credentials the config's s3 section names" in str(refused.value)
        assert secret not in str(refused.value) and secret[::-1] not in str(refused.value)
