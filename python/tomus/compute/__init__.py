"""tomus.compute: MapReduce, IterativeReduce and generalized reduction next to the data.

Jobs run on Dask distributed (a LocalCluster made for the job, or the ``distributed.Client``
passed as ``client=``); tomus holds their inputs, intermediate results and outputs, and gives
Dask locality hints from where the chunks are.

>>> from tomus.compute import IterativeReduce
>>> res = IterativeReduce(lambda x: x * x, sum, ratio=3).run(range(5))  # doctest: +SKIP
>>> res.value, res.reduce_factor, res.reduce_tasks                      # doctest: +SKIP
(30, 5, 2)

Modules: ``engine`` (Dask glue, locality, task records), ``iterative`` (IterativeReduce),
``mapreduce`` (MapReduce with shared appended partitions), ``generalized`` (MATE's API),
``tasklog`` (task records kept in tomus for the dashboard), ``storage`` (objects tasks keep
in tomus), ``joblog`` (what a driver needs to resume), ``appender`` (the two logs' background
appends), ``memcache`` (what a worker keeps in memory between tasks), ``dataset`` (chunked numeric
datasets with an index), ``splits`` (chunk-aligned, line-aware text splits; inputs may be blob
ids or files and directories of the tomus namespace), ``apps`` (reference applications,
runnable as ``python -m tomus.compute APP``), ``demo`` (the demo main job).
"""

from __future__ import annotations

from tomus.compute.dataset import Chunk, Dataset
from tomus.compute.engine import Placement, Session, TaskRecord, session, tomus_client
from tomus.compute.generalized import GeneralizedReduction, iterate
from tomus.compute.iterative import IterativeReduce, IterativeResult, reduce_tasks_needed
from tomus.compute.joblog import create_job
from tomus.compute.mapreduce import MapReduce, MapReduceResult
from tomus.compute.splits import Split, plan_splits, read_text
from tomus.compute.storage import Ref

__all__ = [
    "Chunk",
    "Dataset",
    "GeneralizedReduction",
    "IterativeReduce",
    "IterativeResult",
    "MapReduce",
    "MapReduceResult",
    "Placement",
    "Ref",
    "Session",
    "Split",
    "TaskRecord",
    "create_job",
    "iterate",
    "plan_splits",
    "read_text",
    "reduce_tasks_needed",
    "session",
    "tomus_client",
]
