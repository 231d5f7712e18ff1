"""How the distributed tests and benchmarks/distributed.py start their two
local processes: ``torch.distributed.run`` on the loopback interface, at a
port free when asked."""

from __future__ import annotations

import socket
import sys


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(script: str, *args: str) -> list[str]:
    """The command that runs ``script`` (with ``args``) on 2 local processes."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node=2",
        "--master-addr=127.0.0.1",
        f"--master-port={free_port()}",
        script,
        *args,
    ]
