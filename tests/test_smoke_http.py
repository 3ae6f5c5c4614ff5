"""The sample mirror synced over loopback HTTP gives the same output as from its folder."""

from __future__ import annotations

from pathlib import Path

import yaml

from crawler.cli import main_async

from .conftest import SAMPLE_MIRROR, ServeMirror, fast_config, tree_bytes


async def test_http_and_folder_give_identical_indexes(
    mirror_server: ServeMirror, tmp_path: Path
) -> None:
    server = await mirror_server(SAMPLE_MIRROR)
    outputs = {}
    for name, mirror in (("http", server.url), ("folder", str(SAMPLE_MIRROR))):
        config = tmp_path / f"{name}.yaml"
        config.write_text(yaml.safe_dump(fast_config(mirror, tmp_path / name)))
        code = await main_async(["sync", "--all", "--config", str(config), "-q"])
        assert code == 0
        outputs[name] = tree_bytes(tmp_path / name)
    assert set(outputs["http"]) == set(outputs["folder"])
    for path, data in outputs["http"].items():
        if path.endswith("specs.md"):
            assert data == outputs["folder"][path], path
    assert any(p.endswith("develop-2025-04-20/pages/py-optree/specs.md") for p in outputs["http"])


async def test_infinite_time_limits_mean_none(mirror_server: ServeMirror, tmp_path: Path) -> None:
    """``.inf`` (YAML's infinity) passes the config's checks, so it must work: no limit."""
    server = await mirror_server(SAMPLE_MIRROR)
    config = tmp_path / "c.yaml"
    limits = {"connect": float("inf"), "read": float("inf"), "source": float("inf")}
    config.write_text(yaml.safe_dump(fast_config(server.url, tmp_path / "out", timeouts=limits)))
    assert ".inf" in config.read_text()

    assert await main_async(["sync", "--branch=develop", "--config", str(config), "-q"]) == 0
