"""The background appender of the job and task logs: order, and coalescing of what queues up
while an append is under way, on a real blob."""

from __future__ import annotations

import threading

import tomus
from tomus.compute.appender import Appender


class GatedBlob:
    """A real blob whose first append waits until the test lets it go, so that records are
    given while an append is under way."""

    def __init__(self, blob: tomus.Blob) -> None:
        self.blob = blob
        self.started = threading.Event()
        self.go = threading.Event()
        self.appends: list[bytes] = []

    def append(self, data: bytes) -> object:
        self.appends.append(data)
        self.started.set()
        assert self.go.wait(30)
        return self.blob.append(data)


def test_records_given_during_an_append_go_together_in_the_next_one_in_order(
    tc: tomus.Client,
) -> None:
    gated = GatedBlob(tc.create_blob())
    appender = Appender("test-appender", lambda: gated)
    appender.append(b"a")
    assert gated.started.wait(30)
    done: list[bytes] = []
    for record in (b"b", b"c", b"d"):
        appender.append(record)
    appender.then(lambda: done.append(gated.blob.read(0, gated.blob.size())))
    appender.append(b"e")
    gated.go.set()
    for w in appender.close():
        w.result()
    # b, c, d and e were queued while a was being appended: one append for the four.
    assert gated.appends == [b"a", b"bcde"]
    assert gated.blob.read(0, gated.blob.size()) == b"abcde"
    assert [v.version for v in gated.blob.versions()] == [1, 2]
    # The work ran after everything given before it was appended.
    assert done and done[0].startswith(b"abcd")


def test_a_failed_append_is_reported_by_close_and_the_next_records_still_go(
    tc: tomus.Client,
) -> None:
    blob = tc.create_blob()

    class FailOnce:
        failed = False

        def append(self, data: bytes) -> object:
            if not FailOnce.failed:
                FailOnce.failed = True
                raise tomus.errors.Unavailable("the provider went away")
            return blob.append(data)

    appender = Appender("test-appender", FailOnce)
    appender.append(b"lost")
    outcomes = [w for w in appender.close() if w.exception() is not None]
    assert len(outcomes) == 1 and isinstance(outcomes[0].exception(), tomus.errors.Unavailable)

    appender = Appender("test-appender", lambda: blob)
    appender.append(b"kept")
    for w in appender.close():
        w.result()
    assert blob.read(0, blob.size()) == b"kept"
