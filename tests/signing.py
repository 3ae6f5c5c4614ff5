"""Signing keys for the tests of signed caches: made with the gpg program, in keyrings of
their own (never the user's), as ``spack gpg create`` and ``spack buildcache push`` make and
use them."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

GPG = shutil.which("gpg")
needs_gpg = pytest.mark.skipif(GPG is None, reason="the gpg program is not installed")


@dataclass(frozen=True)
class SigningKey:
    """A key made for a test: its keyring, fingerprint and armoured public key."""

    home: Path
    fingerprint: str
    public: bytes

    def clearsign(self, text: bytes) -> bytes:
        """``text`` clear-signed by this key."""
        return self._gpg("--clearsign", input=text)

    def _gpg(self, *args: str, input: bytes = b"") -> bytes:
        assert GPG is not None
        command = [GPG, "--homedir", str(self.home), "--batch", "--no-tty", *args]
        return subprocess.run(command, input=input, capture_output=True, check=True).stdout


def make_key(name: str) -> SigningKey:
    """A new ed25519 signing key with no passphrase."""
    assert GPG is not None
    home = Path(tempfile.mkdtemp(prefix="crawler-key-"))  # short: gpg-agent's socket is in it
    base = [GPG, "--homedir", str(home), "--batch", "--no-tty"]
    user = f"{name} <{name}@example.org>"
    subprocess.run(
        [*base, "--passphrase", "", "--quick-gen-key", user, "ed25519", "sign", "never"],
        capture_output=True,
        check=True,
    )
    listed = subprocess.run([*base, "--with-colons", "--list-keys"], capture_output=True).stdout
    fingerprint = next(
        line.split(b":")[9].decode() for line in listed.splitlines() if line.startswith(b"fpr:")
    )
    public = subprocess.run([*base, "--armor", "--export", fingerprint], capture_output=True)
    return SigningKey(home, fingerprint, public.stdout)


def drop_key(key: SigningKey) -> None:
    """Stop the key's gpg-agent and remove its keyring."""
    assert GPG is not None
    subprocess.run(["gpgconf", "--homedir", str(key.home), "--kill", "gpg-agent"], check=False)
    shutil.rmtree(key.home, ignore_errors=True)


@pytest.fixture(scope="session")
def signing_keys() -> Iterator[tuple[SigningKey, SigningKey]]:
    """Two keys: the cache's own, and one it does not publish."""
    if GPG is None:
        pytest.skip("the gpg program is not installed")
    keys = make_key("cache"), make_key("stranger")
    yield keys
    for key in keys:
        drop_key(key)
