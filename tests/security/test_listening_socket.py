"""The service's listening socket stays in the service: `toolscout serve` binds its port before the start-up, and
an upstream MCP server (code the service does not trust) started after it inherited that socket and could accept
the API's connections, API keys and all (each demo server held it as its fd 3)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.cluster.cluster_support import Cluster
from tests.upstream.upstream_support import local_server

pytestmark = [pytest.mark.model, pytest.mark.upstream]


def listening_inode(port: int) -> str:
    """The inode of the socket listening on 127.0.0.1:`port` (state 0A in /proc/net/tcp)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == f"0100007F:{port:04X}" and fields[3] == "0A":
            return fields[9]
    raise AssertionError(f"nothing listens on 127.0.0.1:{port}")


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def test_an_upstream_server_does_not_hold_the_api_socket(tmp_path: Path) -> None:
    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {"local": local_server()}}))
    group = Cluster(
        tmp_path,
        f"sqlite:///{tmp_path / 'toolscout.db'}",
        TOOLSCOUT_EXECUTION__SERVERS_FILE=str(servers),
        TOOLSCOUT_CLUSTER__REDIS_URL="",
    )
    try:
        [replica] = group.start(1)
        assert replica.process is not None
        inode = listening_inode(replica.port)
        assert inode in socket_inodes(replica.process.pid)
        upstream = children(replica.process.pid)
        assert upstream, "the upstream server runs as the service's child"
        assert all(inode not in socket_inodes(child) for child in upstream)
    finally:
        group.stop()
