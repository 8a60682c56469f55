"""Data services: work handed to the storage nodes, run beside the computation (DataSteward).

The application hands results over and goes on: a service is submitted to the Dask workers
started on the storage nodes with the ``storage`` resource, runs there next to its data, and
records its attempts, progress and outcome in a log in the tomus namespace
(``/.tomus/services/<id>.log``). A service whose worker dies is run again by Dask.

>>> svc = services.submit_compress(client, dask, ["/results/*"], "/results.tzst")  # doctest: +SKIP
>>> services.wait(client, svc.id).result["gain"]                                 # doctest: +SKIP
0.31

Modules:

- ``runner``: submit to Dask (storage resource, next to the data, fire and forget), the task
  wrapper that logs each attempt, ``status`` (with the scheduler's view), ``list``, ``wait``.
- ``records``: the service log: its JSON-lines format and its replay into a state.
- ``archive``: the ``.tzst`` format of grouped compression (solid zstd frames or a trained
  dictionary) and its reader.
- ``compress``: the grouped-compression service; ``extract`` and ``read`` (reads a file from
  its archive once the original is gone).
- ``tzstfs``: the fsspec file system ``tzst://`` (archive members, chained onto the archive's
  URL: ``tzst://results/a.csv::tomus://results.tzst``).
- ``user``: user functions as services (``fn(ctx, *args)``).
- ``replicate``: geo-replication of a subtree through the manager's engine (``tomus sites``).
- ``cli``: ``tomus service submit|status|list|extract|cat|worker``.
"""

from __future__ import annotations

from tomus.services.archive import Archive, ArchiveError, ArchiveWriter
from tomus.services.compress import extract, read, submit_compress
from tomus.services.records import ServiceState
from tomus.services.replicate import submit_replicate
from tomus.services.runner import (
    STORAGE_RESOURCE,
    Service,
    ServiceContext,
    ServiceError,
    list_services,
    status,
    storage_workers,
    submit,
    wait,
)
from tomus.services.user import submit_function

__all__ = [
    "STORAGE_RESOURCE",
    "Archive",
    "ArchiveError",
    "ArchiveWriter",
    "Service",
    "ServiceContext",
    "ServiceError",
    "ServiceState",
    "extract",
    "list_services",
    "read",
    "status",
    "storage_workers",
    "submit",
    "submit_compress",
    "submit_function",
    "submit_replicate",
    "wait",
]
