"""Who holds a document in the shared cache: a holder is dead here only when it is a process of this machine (boot
and PID namespace, not the host name) that is gone, a zombie or a reused PID; a hold that went stale while the worker
stalled is re-checked before its next request."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ctx_retrieval import pacing
from ctx_retrieval._process import dead_here, worker_id
from ctx_retrieval.contextualize._planning import Plan
from ctx_retrieval.contextualize.cache import ContextCache
from ctx_retrieval.contextualize.leases import TRUST_SHARE, DocumentLeases
from ctx_retrieval.contextualize.prompts import DEFAULT_PROMPT
from ctx_retrieval.types import SourceDocument


def _plan(name: str = "d") -> Plan:
    return Plan(document=SourceDocument(name, "text"), chunks=(), offset=0, tokens=1, digest="x", windowed=False,
                keys=[f"key-{name}"], prefix_tokens=0, prompt=DEFAULT_PROMPT, limit=1000)


class Clock(pacing.Clock):
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_this_process_lives_and_a_zombie_or_a_gone_process_is_dead() -> None:
    assert not dead_here(worker_id())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":  # exited, not reaped
        assert time.monotonic() < deadline
        time.sleep(0.01)
    zombie = worker_id(child.pid)
    assert os.path.exists(f"/proc/{child.pid}") and dead_here(zombie)  # the PID exists, the process is dead
    child.wait()
    assert dead_here(zombie)  # reaped: no such PID


def test_a_reused_pid_is_dead_and_other_machines_or_containers_are_waited_out() -> None:
    host, machine, pid, started, nonce = worker_id().split("|")
    assert dead_here("|".join((host, machine, pid, str(int(started) + 1), nonce)))  # same PID, another process
    # A container with the host's name: its own boot and PID namespace; its PID means nothing here.
    assert not dead_here("|".join((socket.gethostname(), "another-boot/4026530000", "999999", "1", "n")))
    assert not dead_here(f"{socket.gethostname()}:999999:abcd1234")  # a holder id of an earlier version
    assert not dead_here("garbage")


def test_a_live_lease_in_another_namespace_is_not_taken_over(tmp_path: Path) -> None:
    cache = ContextCache(tmp_path / "c.sqlite")
    plan = _plan()
    other = "|".join((socket.gethostname(), "another-boot/4026530000", "999999", "1", "n"))
    assert cache.claim(DocumentLeases.key(plan), other, 30) is None
    assert not DocumentLeases(cache, ttl_s=30).claim(plan)  # waited for, not taken: it may well be running


def test_a_stale_hold_is_not_trusted_until_claimed_again(tmp_path: Path) -> None:
    cache = ContextCache(tmp_path / "c.sqlite")
    clock = Clock()
    mine = DocumentLeases(cache, ttl_s=0.3, clock=clock)
    plan = _plan()
    assert not mine.trusted(plan)  # never claimed
    assert mine.claim(plan) and mine.trusted(plan)
    clock.now += TRUST_SHARE * 0.3 + 0.01  # the process slept through half its lease (SIGSTOP, a GC pause)
    assert not mine.trusted(plan) and mine.rechecked == 2
    time.sleep(0.35)  # the lease expired in the store meanwhile, and another worker took the document
    theirs = DocumentLeases(cache, ttl_s=30)
    assert theirs.claim(plan)
    assert not mine.claim(plan)  # the stalled worker cannot claim it back: it waits for the other's contexts
    # A renewal that no longer returns a key ends its hold at once, whatever the clock says.
    fresh = _plan("e")
    assert mine.claim(fresh) and mine.trusted(fresh)
    mine.renewed([], clock.now)
    assert not mine.trusted(fresh)


def test_a_documents_lease_key_is_hashed_once_however_many_requests(make_generator: Any,
                                                                    monkeypatch: Any) -> None:
    from ctx_retrieval.contextualize import _planning as planning
    from tests.helpers import make_document

    joined: list[int] = []
    real = planning.text_digest

    def spy(text: str) -> str:
        if text.count("\x00") >= 39:  # the lease key joins the document's 40 chunk keys
            joined.append(len(text))
        return real(text)

    monkeypatch.setattr(planning, "text_digest", spy)
    document, chunks = make_document("long-guide", paragraphs=40)
    run = make_generator().contextualize(document, chunks)
    assert run.report.generated == len(chunks) == 40 and len(joined) == 1  # not once per request (quadratic)
