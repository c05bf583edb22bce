"""The pairing under faults (issue 33): random adds and deletes on a core store while the vector store fails, BM25 is
held by a real second process's writer, and writers are SIGKILLed between the two writes; after each operation the
next query (and at the end ``sync()``) is checked against what the operations meant.

    .venv/bin/python benchmarks/pairing_faults.py [--operations 300] [--fault-rate 0.3] [--kills 6]
        [--damage-rate 0.1] [--soak 400]

The cookbook corpus's chunks (recorded contexts) in a store on disk, vectors from the offline MiniLM embedder
(cached). Each operation adds a new chunk (a unique word in it) or deletes a live one; with ``--fault-rate`` the
vector store raises during it or BM25's writer is held by another process for the whole write; ``--kills`` of them
run in a child process killed (SIGKILL) between the two writes. After each operation one query for the chunk's word:
a deleted chunk returned counts as a wrong answer; an added chunk missing from the next query counts as missed (a
failed add the caller was told about, by its exception, is not expected). Printed: operations, faults, kills,
deleted chunks returned, added chunks missed without an error, and what ``sync()`` found left to do at the end.
With ``--damage-rate``, that share of operations first writes a damaged entry into the journal (cut short, wrong
types, an unknown op, no writer: issue 51), which must change no answer. ``--soak N`` then runs the stateful test of
two machines over one collection (``tests/unit/test_pairing_stateful.py``) with N examples and prints its outcome.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

HOLDER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from ctx_retrieval.retrieval.bm25_store import BM25Store
    with BM25Store({folder!r})._writer():
        print("holding", flush=True)
        sys.stdin.readline()
""")

KILLED = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {root!r})
    from ctx_retrieval import MiniLMEmbedder
    from ctx_retrieval.retrieval import store as core
    from ctx_retrieval.retrieval.bm25_store import BM25Store
    op, chunk_id, word = sys.argv[1:4]
    owner, method = (core._ChromaRows, "add_rows") if op == "add" else (BM25Store, "delete")
    real = getattr(owner, method)
    def then_die(self, *args):
        real(self, *args)
        os.kill(os.getpid(), signal.SIGKILL)
    setattr(owner, method, then_die)
    store = core.open_store({path!r}, embedder=MiniLMEmbedder(cache=True))
    if op == "add":
        store.add([core.IndexedChunk(chunk_id, "new", f"A new paragraph about {{word}} and the corpus.", None)])
    else:
        store.delete([chunk_id])
""")


class Holder:
    def __init__(self, folder: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", HOLDER.format(root=ROOT, folder=folder)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None and self.process.stdout.readline().strip() == "holding"

    def release(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--operations", type=int, default=300)
    parser.add_argument("--fault-rate", type=float, default=0.3)
    parser.add_argument("--kills", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--damage-rate", type=float, default=0.1)
    parser.add_argument("--soak", type=int, default=0, help="examples of the two-machine stateful test")
    args = parser.parse_args()

    from ctx_retrieval import MiniLMEmbedder, SearchIndexError
    from ctx_retrieval.evaluation import RecordedContextualizer, load_cookbook
    from ctx_retrieval.retrieval import store as core

    rng = random.Random(args.seed)
    corpus = load_cookbook()
    contexts = RecordedContextualizer().contexts()
    embedder = MiniLMEmbedder(cache=True)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "store")
        chunks = [core.IndexedChunk(c.id, d.id, c.text, contexts.get(c.id)) for d, cs in corpus.items for c in cs]
        core.build_store(path, chunks, embedder=embedder).close()
        store = core.open_store(path, embedder=embedder)
        live: dict[str, str] = {}  # chunk id -> its unique word, for the chunks this run added
        deleted: dict[str, str] = {}
        faults = kills = wrong = missed = told = damaged = 0
        damages = ['{"op": "delete", "ids": ["', '{"op": "delete", "ids": 5, "writer": "w"}', '{"op": "move"}',
                   '{"op": "add", "ids": []}', "", "[1, 2"]
        kill_at = set(rng.sample(range(args.operations), min(args.kills, args.operations)))
        real = {name: getattr(core._ChromaRows, name) for name in ("add_rows", "delete_rows")}
        for n in range(args.operations):
            adding = not live or rng.random() < 0.6
            chunk_id = f"new{n}" if adding else rng.choice(sorted(live))
            word = f"zeta{n}q" if adding else live[chunk_id]
            fault = rng.random() < args.fault_rate
            holder = None
            if rng.random() < args.damage_rate:  # a damaged entry beside the writes: it must change no answer
                damaged += 1
                with open(os.path.join(path, "bm25-store", ".pairing", f"{n:06d}-damaged.json"), "w") as entry:
                    entry.write(rng.choice(damages))
            if n in kill_at:
                kills += 1
                store.close()
                child = subprocess.run([sys.executable, "-c", KILLED.format(root=ROOT, path=path),
                                        "add" if adding else "delete", chunk_id, word], capture_output=True)
                assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-500:]
                from chromadb.api.client import SharedSystemClient

                SharedSystemClient.clear_system_cache()  # this process's Chroma reads the folder again
                store = core.open_store(path, embedder=embedder)  # finishes the dead writer's entry
                ok = True
            else:
                if fault:
                    faults += 1
                    if rng.random() < 0.5:
                        method = "add_rows" if adding else "delete_rows"

                        def failing(self: Any, *rows: Any, _method: str = method) -> None:
                            raise ConnectionError(f"the vector store failed in {_method}")

                        setattr(core._ChromaRows, method, failing)
                    else:
                        store.bm25.writer_timeout_s = 0.2
                        holder = Holder(os.path.join(path, "bm25-store"))
                try:
                    if adding:
                        store.add([core.IndexedChunk(chunk_id, "new", f"A new paragraph about {word} and the "
                                                     "corpus.", None)])
                    else:
                        store.delete([chunk_id])
                    ok = True
                except (ConnectionError, SearchIndexError):
                    ok = False
                    told += 1
                finally:
                    for name, method_ in real.items():
                        setattr(core._ChromaRows, name, method_)
                    if holder is not None:
                        holder.release()
                        store.bm25.writer_timeout_s = 30.0
            if adding:
                live[chunk_id] = word
            else:
                deleted[chunk_id] = live.pop(chunk_id)
            found = {h.chunk.chunk_id for h in store.search(f"paragraph about {word}", k=5)}
            if not adding and chunk_id in found:
                wrong += 1
            if adding and ok and chunk_id not in found:
                missed += 1
            if adding and not ok:  # a failed add the caller was told about: retried, as a caller would
                store.add([core.IndexedChunk(chunk_id, "new", f"A new paragraph about {word} and the corpus.", None)])
            if not adding and not ok:
                store.delete([chunk_id])
        report = store.sync()
        ids = set(store.collection.get(include=[])["ids"])
        left_deleted = sum(1 for i in deleted if i in ids or store.bm25.get([i]))
        left_missing = sum(1 for i in live if i not in ids or not store.bm25.get([i]))
    print(f"{args.operations} operations ({faults} with a fault, {kills} killed between the two writes, {told} "
          f"raised to the caller, {damaged} beside a damaged journal entry)")
    print(f"deleted chunks returned by the next query: {wrong}")
    print(f"added chunks missed by the next query without an error: {missed}")
    print(f"sync() at the end: {report}; deleted chunks still held: {left_deleted}; added chunks not on both "
          f"sides: {left_missing}")
    if args.soak:
        soak = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               os.path.join(ROOT, "tests", "unit", "test_pairing_stateful.py")], cwd=ROOT,
                              env={**os.environ, "CTX_STATEFUL_EXAMPLES": str(args.soak)}, capture_output=True,
                              text=True)
        print(f"two machines, stateful soak of {args.soak} examples: "
              f"{(soak.stdout.strip().splitlines() or ['no output'])[-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
