"""The pairing under random interleavings (issue 51): two machines, each with its own BM25 copy, over one server's
collection; adds, updates, deletes, queries, writes that fail halfway, outside writes and journal damage. Invariant:
no query returns a chunk the collection no longer holds, or a version it no longer holds; after ``sync()`` a
machine's BM25 holds exactly the collection; nothing raises but the faults injected. ``CTX_STATEFUL_EXAMPLES`` runs
more (``benchmarks/`` soak: ``CTX_STATEFUL_EXAMPLES=500 pytest tests/unit/test_pairing_stateful.py``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule  # noqa: E402

from ctx_retrieval.retrieval.bm25_store import BM25Store  # noqa: E402
from ctx_retrieval.retrieval.hybrid import BM25Side, HybridRetriever  # noqa: E402
from ctx_retrieval.retrieval.pairing import Pairing, Row  # noqa: E402
from tests.unit.test_pairing import Codec, ServerVectors, decode, rec  # noqa: E402

IDS = st.sampled_from([f"c{n}" for n in range(4)])
WORDS = st.lists(st.sampled_from(["acme", "globex", "foundry", "tucson", "revenue", "zanzibar", "ledger"]),
                 min_size=1, max_size=4).map(" ".join)
MACHINE = st.integers(0, 1)


class TwoMachines(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.folder = Path(tempfile.mkdtemp(prefix="ctx-stateful-"))
        self.server = ServerVectors()
        self.machines = [Pairing(self.server, BM25Store(self.folder / f"bm25-{n}")) for n in range(2)]

    def teardown(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def _write(self, machine: int, write: object) -> None:
        with contextlib.suppress(ConnectionError):  # a fault injected: the journal keeps the write for the next one
            write()  # type: ignore[operator]

    @rule(machine=MACHINE, chunk=IDS, words=WORDS, fails=st.booleans())
    def add_or_update(self, machine: int, chunk: str, words: str, fails: bool) -> None:
        self.server.fail = "add_rows" if fails else None
        self._write(machine, lambda: self.machines[machine].add([rec(chunk, f"{chunk} {words}")]))
        self.server.fail = None

    @rule(machine=MACHINE, chunk=IDS, fails=st.booleans())
    def delete(self, machine: int, chunk: str, fails: bool) -> None:
        self.server.fail = "delete_rows" if fails else None
        self._write(machine, lambda: self.machines[machine].delete([chunk]))
        self.server.fail = None

    @rule(chunk=IDS, words=WORDS, gone=st.booleans())
    def outside_write(self, chunk: str, words: str, gone: bool) -> None:
        if gone:
            self.server.rows.pop(chunk, None)
        else:
            self.server.rows[chunk] = Row(chunk, f"{chunk} {words}", rec(chunk, f"{chunk} {words}"))

    @rule(machine=MACHINE, text=st.sampled_from(['{"op": "delete", "ids": ["c1", "c2', '{"ids": 5}', "", "[]"]))
    def damage_the_journal(self, machine: int, text: str) -> None:
        folder = self.folder / f"bm25-{machine}" / ".pairing"
        (folder / f"{len(list(folder.iterdir())):04d}-damaged.json").write_text(text, encoding="utf-8")

    @rule(machine=MACHINE, words=WORDS)
    def query(self, machine: int, words: str) -> None:
        pairing = self.machines[machine]
        retriever = HybridRetriever(self.server, BM25Side(pairing.bm25, decode), screen=pairing.guard(Codec()))
        deleting = {i for intent in pairing.journal.pending() if intent.op == "delete" for i in intent.ids}
        for hit in retriever.retrieve(words, 10):
            held = self.server.rows.get(hit.item.id)
            assert held is not None, f"{hit.item.id} returned, but the collection no longer holds it"
            assert hit.item.text == held.record.text, f"{hit.item.id} returned in a version no longer held"
            assert hit.item.id not in deleting, f"{hit.item.id} returned while its delete is journaled"

    @rule(machine=MACHINE)
    def sync(self, machine: int) -> None:
        pairing = self.machines[machine]
        pairing.sync()
        held = {i: r.record.text for i, r in self.server.rows.items()}
        assert sorted(pairing.bm25.ids()) == sorted(held)
        stored = pairing.bm25.get(list(held))
        assert all(stored[i].payload.decode() == text for i, text in held.items())  # the versions held

    @invariant()
    def nothing_pending_is_lost(self) -> None:
        for pairing in self.machines:
            assert all(intent.op in ("add", "delete") for intent in pairing.journal.pending())


TwoMachines.TestCase.settings = settings(
    max_examples=int(os.environ.get("CTX_STATEFUL_EXAMPLES", "40")), stateful_step_count=18, deadline=None,
    derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_the_pairing_keeps_one_truth_across_two_machines = TwoMachines.TestCase
