"""A BLAST-like workflow (the AFM paper's case study): DNA queries split over N matchers that
each compare their part with the same 3 database files (a broadcast), then one assembler.

Jobs::

    gen-db0..2   -> db0.fa db1.fa db2.fa        stage-in: random DNA records
    gen-queries  -> queries.fa planted.tsv      reads the 3 databases to plant true matches
    split        -> part-0.fa .. part-{N-1}.fa  whole records, contiguous, balanced by bytes
    match-i      -> hits-i.tsv                  part-i.fa against db0..2.fa
    assemble     -> hits.tsv                    all hits, sorted

The matcher is a real seed-and-extend search, vectorised with numpy: every 16-mer of the
database is indexed (sorted codes), every 16-mer of a query is looked up, and each seed is
extended without gaps on its diagonal with an X-drop rule (+2 per match, -3 per mismatch,
stop 12 below the best); extended segments scoring at least 60 are hits. The planted
matches (segments of 80-150 bases copied from a database record with ~3% substitutions)
must all be found. :func:`reference` runs the same search in one process over the unsplit
queries: ``hits.tsv`` must equal it line for line.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from tomus.workflow.dag import Workflow

__all__ = ["found_planted", "match", "reference", "workflow"]

K = 16
MATCH, MISMATCH, XDROP, MIN_SCORE = 2, -3, 12, 60
_ACGT = b"ACGT"
# A, C, G, T -> 0..3; anything else (the separator N) -> 4, which no k-mer may contain.
_CODE = bytes(_ACGT.index(c) if c in _ACGT else 4 for c in range(256))


def _records(path: Path) -> list[tuple[str, bytes]]:
    """(id, sequence) of each FASTA record."""
    out: list[tuple[str, bytes]] = []
    name: str | None = None
    seq: list[bytes] = []
    with open(path, "rb") as f:
        for line in f:
            line = line.rstrip(b"\n")
            if line.startswith(b">"):
                if name is not None:
                    out.append((name, b"".join(seq)))
                name, seq = line[1:].decode(), []
            elif line:
                seq.append(line)
    if name is not None:
        out.append((name, b"".join(seq)))
    return out


def _write_fasta(path: Path, records: list[tuple[str, bytes]]) -> None:
    with open(path, "wb") as f:
        for name, seq in records:
            f.write(b">" + name.encode() + b"\n")
            for i in range(0, len(seq), 80):
                f.write(seq[i : i + 80] + b"\n")


def _random_records(
    rng: np.random.Generator, prefix: str, size: int, lo: int, hi: int
) -> list[tuple[str, bytes]]:
    records: list[tuple[str, bytes]] = []
    total = i = 0
    while total < size or not records:
        n = int(rng.integers(lo, hi))
        seq = bytes(np.frombuffer(_ACGT, np.uint8)[rng.integers(0, 4, n)])
        records.append((f"{prefix}{i}", seq))
        total, i = total + n, i + 1
    return records


def gen_db(task_dir: Path, *, index: int, size: int, seed: int) -> None:
    rng = np.random.default_rng(seed * 1000 + index)
    _write_fasta(task_dir / f"db{index}.fa", _random_records(rng, f"db{index}_s", size, 500, 2000))


def gen_queries(task_dir: Path, *, size: int, seed: int, plant_every: int = 10) -> None:
    """Random queries; one in ``plant_every`` carries a mutated copy of a database segment,
    listed in ``planted.tsv`` (query, database, subject, query start, subject start, length)."""
    rng = np.random.default_rng(seed * 1000 + 999)
    dbs = [_records(task_dir / f"db{i}.fa") for i in range(3)]
    queries = _random_records(rng, "q", size, 200, 600)
    planted = []
    for qi in range(0, len(queries), plant_every):
        name, seq = queries[qi]
        d = int(rng.integers(0, 3))
        sid, sseq = dbs[d][int(rng.integers(0, len(dbs[d])))]
        n = int(rng.integers(80, 151))
        s0 = int(rng.integers(0, len(sseq) - n))
        q0 = int(rng.integers(0, len(seq) - n))
        seg = bytearray(sseq[s0 : s0 + n])
        # ~3% substitutions, never in the middle 16 bases (one seed is always left whole).
        for p in rng.choice(n, max(1, n * 3 // 100), replace=False):
            if not n // 2 - 8 <= p < n // 2 + 8:
                seg[p] = _ACGT[(_ACGT.index(seg[p]) + int(rng.integers(1, 4))) % 4]
        queries[qi] = (name, seq[:q0] + bytes(seg) + seq[q0 + n :])
        planted.append(f"{name}\tdb{d}.fa\t{sid}\t{q0}\t{s0}\t{n}\n")
    _write_fasta(task_dir / "queries.fa", queries)
    (task_dir / "planted.tsv").write_text("".join(planted))


def split(task_dir: Path, *, parts: int) -> None:
    """Whole records into ``parts`` contiguous files of about equal bytes."""
    records = _records(task_dir / "queries.fa")
    total = sum(len(s) for _, s in records) or 1
    groups: list[list[tuple[str, bytes]]] = [[] for _ in range(parts)]
    done = 0
    for rec in records:
        groups[min(parts - 1, done * parts // total)].append(rec)
        done += len(rec[1])
    for i, g in enumerate(groups):
        _write_fasta(task_dir / f"part-{i}.fa", g)


def _concat(records: list[tuple[str, bytes]]) -> tuple[np.ndarray, np.ndarray]:
    """Codes of all records joined by separators, and each record's start."""
    joined = b"N".join(s for _, s in records) + b"N"
    starts = np.cumsum([0] + [len(s) + 1 for _, s in records[:-1]]) if records else np.zeros(0)
    return np.frombuffer(joined.translate(_CODE), np.uint8), np.asarray(starts, np.int64)


def _kmers(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(k-mer code, position) of every window of K bases without a separator."""
    n = len(codes) - K + 1
    if n <= 0:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    kmer = np.zeros(n, np.uint64)
    for t in range(K):
        kmer = (kmer << np.uint64(2)) | (codes[t : t + n] & 3).astype(np.uint64)
    bad = np.concatenate([[0], np.cumsum(codes == 4)])
    ok = (bad[K : K + n] - bad[:n]) == 0
    pos = np.nonzero(ok)[0]
    return kmer[ok], pos


def _extend(q: bytes, s: bytes, qi: int, si: int) -> tuple[int, int, int]:
    """Ungapped X-drop extension of the seed at q[qi:qi+K] = s[si:si+K]: (start offset,
    end offset, score), offsets relative to the seed's start."""
    score = best = K * MATCH
    right = K
    i = K
    while qi + i < len(q) and si + i < len(s):
        score += MATCH if q[qi + i] == s[si + i] else MISMATCH
        i += 1
        if score > best:
            best, right = score, i
        elif best - score > XDROP:
            break
    score, left, i = best, 0, -1
    while qi + i >= 0 and si + i >= 0:
        score += MATCH if q[qi + i] == s[si + i] else MISMATCH
        if score > best:
            best, left = score, i
        elif best - score > XDROP:
            break
        i -= 1
    return left, right, best


def match(query_file: Path, db_files: list[Path]) -> list[str]:
    """The hits of every query of ``query_file`` in the databases, as sorted TSV lines:
    query, database, subject, query start, query end, subject start, subject end, score."""
    queries = _records(query_file)
    qcodes, qstarts = _concat(queries)
    qk, qpos = _kmers(qcodes)
    hits: list[str] = []
    for db_file in db_files:
        subjects = _records(db_file)
        scodes, sstarts = _concat(subjects)
        sk, spos = _kmers(scodes)
        order = np.argsort(sk, kind="stable")
        sk, spos = sk[order], spos[order]
        lo = np.searchsorted(sk, qk, "left")
        hi = np.searchsorted(sk, qk, "right")
        counts = hi - lo
        # Every (query k-mer, database position) pair with equal codes, without a Python loop:
        # run j of the repeated starts counts up from lo[j].
        total = int(counts.sum())
        seed_q = np.repeat(qpos, counts)
        run_start = np.repeat(np.cumsum(counts) - counts, counts)
        seed_s = spos[np.repeat(lo, counts) + np.arange(total) - run_start]
        qrec = np.searchsorted(qstarts, seed_q, "right") - 1
        srec = np.searchsorted(sstarts, seed_s, "right") - 1
        qoff = seed_q - qstarts[qrec]
        soff = seed_s - sstarts[srec]
        diag = soff - qoff
        # Seeds by (query, subject, diagonal, query offset): one extension per segment.
        last_key, last_end = (-1, -1, 0), 0
        for i in np.lexsort((qoff, diag, srec, qrec)):
            key = (int(qrec[i]), int(srec[i]), int(diag[i]))
            if key == last_key and int(qoff[i]) < last_end:
                continue
            qname, q = queries[key[0]]
            sname, s = subjects[key[1]]
            left, right, score = _extend(q, s, int(qoff[i]), int(soff[i]))
            last_key, last_end = key, int(qoff[i]) + right
            if score >= MIN_SCORE:
                q0 = int(qoff[i])
                s0 = int(soff[i])
                hits.append(
                    f"{qname}\t{db_file.name}\t{sname}\t{q0 + left}\t{q0 + right}\t"
                    f"{s0 + left}\t{s0 + right}\t{score}\n"
                )
    return sorted(set(hits))


def matcher(task_dir: Path, *, part: int) -> None:
    lines = match(task_dir / f"part-{part}.fa", [task_dir / f"db{i}.fa" for i in range(3)])
    (task_dir / f"hits-{part}.tsv").write_text("".join(lines))


def assemble(task_dir: Path, *, parts: int) -> None:
    lines: list[str] = []
    for i in range(parts):
        with open(task_dir / f"hits-{i}.tsv") as f:
            lines.extend(f)
    (task_dir / "hits.tsv").write_text("".join(sorted(lines)))


def workflow(
    size: int,
    *,
    matchers: int = 4,
    db_size: int | None = None,
    dir: str = "/wf/blast",
    seed: int = 1,
) -> Workflow:
    """Queries of about ``size`` bytes, ``matchers`` matcher jobs, 3 databases of
    ``db_size`` bytes each (default: ``size``)."""
    if matchers < 1:
        raise ValueError("matchers must be at least 1")
    db_size = size if db_size is None else db_size
    dbs = [f"db{i}.fa" for i in range(3)]
    wf = Workflow("blast", dir)
    for i in range(3):
        wf.task(
            f"gen-db{i}",
            fn=functools.partial(gen_db, index=i, size=db_size, seed=seed),
            outputs=[dbs[i]],
        )
    wf.task(
        "gen-queries",
        fn=functools.partial(gen_queries, size=size, seed=seed),
        inputs=dbs,
        outputs=["queries.fa", "planted.tsv"],
    )
    parts = [f"part-{i}.fa" for i in range(matchers)]
    wf.task(
        "split", fn=functools.partial(split, parts=matchers), inputs=["queries.fa"], outputs=parts
    )
    for i in range(matchers):
        wf.task(
            f"match-{i}",
            fn=functools.partial(matcher, part=i),
            inputs=[parts[i], *dbs],
            outputs=[f"hits-{i}.tsv"],
        )
    wf.task(
        "assemble",
        fn=functools.partial(assemble, parts=matchers),
        inputs=[f"hits-{i}.tsv" for i in range(matchers)],
        outputs=["hits.tsv"],
    )
    return wf


def found_planted(hits: str, planted: str) -> tuple[int, int]:
    """(planted matches found, planted matches): a planted segment is found when a hit of its
    query in its subject lies on its diagonal and overlaps it."""
    by_pair: dict[tuple[str, str, str], list[tuple[int, int, int]]] = {}
    for line in hits.splitlines():
        q, d, s, q0, q1, s0, _s1, _score = line.split("\t")
        by_pair.setdefault((q, d, s), []).append((int(q0), int(q1), int(s0) - int(q0)))
    found = total = 0
    for line in planted.splitlines():
        q, d, s, q0, s0, n = line.split("\t")
        total += 1
        diag = int(s0) - int(q0)
        found += any(
            dg == diag and a < int(q0) + int(n) and b > int(q0)
            for a, b, dg in by_pair.get((q, d, s), [])
        )
    return found, total


def reference(wf: Workflow, work_dir: str | Path | None = None) -> dict[str, Any]:
    """The stage-in jobs of ``wf``, then one search of all the queries in one process: the
    hits the workflow's ``hits.tsv`` must equal, and the planted matches."""
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        d = Path(tmp)
        for t in wf.validate():
            if t.name.startswith("gen-"):
                assert t.fn is not None
                t.fn(d)
        hits = "".join(match(d / "queries.fa", [d / f"db{i}.fa" for i in range(3)]))
        return {"hits": hits, "planted": (d / "planted.tsv").read_text()}
