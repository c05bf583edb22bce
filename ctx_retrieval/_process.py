"""Who a process is, and whether one of this machine still lives: for leases on the context cache and for the
pairing's journal and openers, which must tell a crashed writer from a live one.

"This machine" is the kernel's boot id and the process's PID namespace, never the host name (a container may share
the host's name while its PIDs mean nothing here); a PID whose process started at another time was reused, and a
zombie (exited, not yet reaped) is dead.
"""

from __future__ import annotations

import os
import socket
import uuid

_SEP = "|"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def _machine() -> str:
    """Where a PID means the same process: the kernel's boot id and this process's PID namespace (Linux); the host
    name elsewhere, where the PID check below cannot run anyway."""
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = None
    if boot and namespace:
        return f"{boot}/{namespace.removeprefix('pid:').strip('[]')}"
    return f"host/{socket.gethostname()}"


def _stat(pid: int) -> tuple[str, str] | None:
    """``(state, start time in clock ticks)`` of a process from ``/proc/<pid>/stat``, or None when there is none."""
    text = _read(f"/proc/{pid}/stat")
    if not text or ")" not in text:
        return None
    fields = text.rsplit(")", 1)[1].split()  # after "pid (comm)": state is field 3, starttime field 22
    return (fields[0], fields[19]) if len(fields) > 19 else None


def worker_id(pid: int | None = None) -> str:
    """``host|machine|pid|start|nonce``: unique per run, and enough to tell whether a holder on this machine lives.
    ``pid`` names another process of this machine (tests)."""
    pid = os.getpid() if pid is None else pid
    stat = _stat(pid)
    return _SEP.join((socket.gethostname().replace(_SEP, "_"), _machine(), str(pid), stat[1] if stat else "-",
                      uuid.uuid4().hex[:8]))


def dead_here(holder: str) -> bool:
    """True only when ``holder`` ran on this machine (same boot, same PID namespace) and its process is gone: no
    such PID, a zombie, or the PID now belongs to a process that started at another time. Anything else (another
    machine or container, a holder id this version did not write) is waited out for its lease's TTL."""
    parts = holder.split(_SEP)
    if len(parts) != 5 or parts[1] != _machine() or not parts[2].isdigit():
        return False
    pid, started = int(parts[2]), parts[3]
    if parts[1].startswith("host/"):  # no /proc: only whether the PID exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False
    stat = _stat(pid)
    return stat is None or stat[0] in ("Z", "X") or (started != "-" and stat[1] != started)


def same_process(holder: str) -> bool:
    """Whether ``holder`` (a ``worker_id``) names this very process (any nonce)."""
    mine = worker_id().split(_SEP)[:4]
    return holder.split(_SEP)[:4] == mine
