"""The namespace against a model (hypothesis): random mkdir, put, rename and delete on a real
cluster, one at a time, each answer (success or error type) and the whole tree after it as a
dict of paths says; then the same operations from several threads at once, after which the
tree must still be a tree and every file must hold exactly one payload that was put."""

from __future__ import annotations

import itertools
import random
import threading
import uuid

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

import tomus

DIR = "dir"
# Paths of up to three segments over two names: few enough that operations collide often
# (renames onto existing entries, puts below files, deletes of non-empty directories).
SEGMENT = st.sampled_from(["a", "b"])
PATH = st.lists(SEGMENT, min_size=1, max_size=3).map("/".join)


def ancestors(path: str) -> list[str]:
    """The directories above `path`, nearest last (the root, "", excluded)."""
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


class Model:
    """What the namespace should hold below one test root: path -> DIR or a file's bytes."""

    def __init__(self) -> None:
        self.entries: dict[str, object] = {}

    def kind(self, path: str) -> str | None:
        if path == "":
            return DIR
        e = self.entries.get(path)
        return None if e is None else DIR if e == DIR else "file"

    def below(self, path: str) -> list[str]:
        return [p for p in self.entries if p.startswith(path + "/")]

    def make_parents(self, path: str) -> str | None:
        """Makes the missing directories above `path`; the error when one is a file."""
        for a in ancestors(path):
            if self.kind(a) == "file":
                return "NotADirectory"
        for a in ancestors(path):
            self.entries.setdefault(a, DIR)
        return None

    def mkdir(self, path: str, parents: bool) -> str | None:
        kind = self.kind(path)
        if kind == DIR:
            return None if parents else "AlreadyExists"
        if kind == "file":
            return "NotADirectory"
        if parents:
            err = self.make_parents(path)
            if err:
                return err
        else:
            parent = ancestors(path)[-1] if "/" in path else ""
            if self.kind(parent) == "file":
                return "NotADirectory"
            if self.kind(parent) is None:
                return "NotFound"
        self.entries[path] = DIR
        return None

    def put(self, path: str, data: bytes) -> str | None:
        if self.kind(path) == DIR:
            return "IsADirectory"
        if any(self.kind(a) == "file" for a in ancestors(path)):
            return "NotADirectory"
        self.make_parents(path)
        self.entries[path] = data
        return None

    def rename(self, src: str, dst: str) -> str | None:
        if src == dst:
            return None if self.kind(src) else "NotFound"
        if dst.startswith(src + "/"):
            return "InvalidArgument"
        kind = self.kind(src)
        if kind is None:
            return "NotFound"
        existing = self.kind(dst)
        if existing is not None and not (existing == "file" and kind == "file"):
            return "AlreadyExists"
        err = self.make_parents(dst)
        if err:
            return err
        moved = {dst: self.entries.pop(src)}
        for p in self.below(src):
            moved[dst + p[len(src) :]] = self.entries.pop(p)
        self.entries.update(moved)
        return None

    def delete(self, path: str, recursive: bool) -> str | None:
        kind = self.kind(path)
        if kind is None:
            return "NotFound"
        below = self.below(path)
        if below and not recursive:
            return "NotEmpty"
        for p in below:
            del self.entries[p]
        del self.entries[path]
        return None


def outcome(call: object) -> str | None:
    """None when `call()` succeeds, else the name of the tomus error it raised."""
    try:
        call()  # type: ignore[operator]
    except tomus.TomusError as e:
        return type(e).__name__
    return None


def tree(ns: tomus.Namespace, root: str) -> dict[str, object]:
    """The namespace below `root` as the model holds it: directories, and files' bytes."""
    out: dict[str, object] = {}
    for entry in ns.list(root, recursive=True):
        path = entry["name"][len(root) + 1 :]
        if entry["type"] == "directory":
            out[path] = DIR
        else:
            out[path] = ns.open(entry["name"])[1].read()
    return out


class NamespaceMachine(RuleBasedStateMachine):
    client: tomus.Client

    def __init__(self) -> None:
        super().__init__()
        self.ns = self.client.namespace()
        self.root = f"model-{uuid.uuid4().hex[:12]}"
        self.ns.mkdir(self.root)
        self.model = Model()
        self.puts = 0

    def at(self, path: str) -> str:
        return f"{self.root}/{path}"

    @rule(path=PATH, parents=st.booleans())
    def mkdir(self, path: str, parents: bool) -> None:
        want = self.model.mkdir(path, parents)
        assert outcome(lambda: self.ns.mkdir(self.at(path), parents)) == want

    @rule(path=PATH, size=st.sampled_from([0, 1, 5000]))
    def put(self, path: str, size: int) -> None:
        self.puts += 1
        data = (f"{self.puts}:" * size)[:size].encode()

        def write() -> None:
            _, blob = self.ns.create(self.at(path), chunk_size=4096, replication=2)
            blob.replace(data)

        assert outcome(write) == self.model.put(path, data)

    @rule(src=PATH, dst=PATH)
    def rename(self, src: str, dst: str) -> None:
        want = self.model.rename(src, dst)
        assert outcome(lambda: self.ns.rename(self.at(src), self.at(dst))) == want

    @rule(path=PATH, recursive=st.booleans())
    def delete(self, path: str, recursive: bool) -> None:
        want = self.model.delete(path, recursive)
        assert outcome(lambda: self.ns.delete(self.at(path), recursive)) == want

    @invariant()
    def tree_matches_the_model(self) -> None:
        assert tree(self.ns, self.root) == self.model.entries

    def teardown(self) -> None:
        self.ns.delete(self.root, True)


def test_namespace_operations_match_the_model(client: tomus.Client) -> None:
    NamespaceMachine.client = client
    run_state_machine_as_test(
        NamespaceMachine,
        settings=settings(max_examples=25, stateful_step_count=30, deadline=None),
    )


PATHS = ["/".join(p) for n in (1, 2, 3) for p in itertools.product("ab", repeat=n)]


def random_operations(
    ns: tomus.Namespace, root: str, seed: int, payloads: set[bytes], lock: threading.Lock
) -> None:
    """60 random operations below `root`; what each put writes is added to `payloads`."""
    rnd = random.Random(seed)
    for i in range(60):
        path = f"{root}/{rnd.choice(PATHS)}"
        op = rnd.randrange(4)
        try:
            if op == 0:
                ns.mkdir(path, rnd.random() < 0.5)
            elif op == 1:
                data = (f"{seed}.{i}:" * 700).encode()
                with lock:
                    payloads.add(data)
                _, blob = ns.create(path, chunk_size=4096, replication=2)
                blob.replace(data)
            elif op == 2:
                ns.rename(path, f"{root}/{rnd.choice(PATHS)}")
            else:
                ns.delete(path, rnd.random() < 0.5)
        except tomus.TomusError:
            pass  # the paths change under every thread: refusals are expected


def test_concurrent_operations_leave_a_tree_of_whole_payloads(client: tomus.Client) -> None:
    """Four threads run random operations on the same few paths at once, three rounds. After
    each, every entry's parent is a directory, and every file holds exactly one payload a put
    wrote, each payload under one name at most. (A creation racing the publication of a new
    file below it once left a file listed below a file.)"""
    ns = client.namespace()
    for round in range(3):
        root = f"concurrent-{uuid.uuid4().hex[:12]}"
        ns.mkdir(root)
        payloads: set[bytes] = set()
        lock = threading.Lock()
        threads = [
            threading.Thread(
                target=random_operations, args=(ns, root, round * 10 + seed, payloads, lock)
            )
            for seed in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

        found = tree(ns, root)
        for path, content in found.items():
            for a in ancestors(path):
                assert found.get(a) == DIR, f"{path} is listed but {a} is not a directory"
            if content != DIR:
                assert content in payloads, f"{path} holds bytes no put wrote"
        files = [c for c in found.values() if c != DIR]
        assert len(files) == len(set(files)), "one payload is under two names"
        ns.delete(root, True)
        with pytest.raises(tomus.NotFound):
            ns.stat(root)
