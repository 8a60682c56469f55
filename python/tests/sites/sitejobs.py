"""Task functions of the multi-site tests, in a module of their own so Dask worker processes
import them by name."""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

from tomus.compute.apps.text import words
from tomus.compute.engine import tomus_client
from tomus.compute.splits import Split, read_text


class SlowCount:
    """MostFrequentWords' mapper, slowed down by ``delay`` seconds per split, leaving a marker
    ``<marks>/<cluster port>-<pid>`` first so a test can tell that a site's maps are running."""

    def __init__(self, marks: str, delay: float) -> None:
        self.marks, self.delay = marks, delay

    def __call__(self, split: Split) -> Counter[bytes]:
        client = tomus_client()
        Path(self.marks, f"{client.addr.rsplit(':', 1)[1]}-{os.getpid()}").touch()
        time.sleep(self.delay)
        return Counter(words(read_text(client, split)))
