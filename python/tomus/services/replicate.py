"""Geo-replication as a data service: the hook the geo-replication engine plugs into.

``tomus service submit replicate --subtree /results --target HOST:PORT`` records a service of
kind ``replicate`` (params ``subtree``, ``target`` and ``options``) and runs ``run`` on a storage
worker like any other service: its attempts, progress, retries and outcome are in the service
log. The copying itself belongs to the geo-replication engine (issue 14), built separately;
``run`` is the one place that calls it. Until it is wired, a replicate service fails at once
with a clear error instead of pretending to work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tomus.services.runner import ServiceError

if TYPE_CHECKING:
    from distributed import Client as DaskClient

    from tomus.services.runner import Service, ServiceContext

import tomus

__all__ = ["run", "submit_replicate"]


def submit_replicate(
    client: tomus.Client,
    dask: DaskClient,
    subtree: str,
    target: str,
    *,
    options: dict[str, Any] | None = None,
    retries: int = 0,
) -> Service:
    """Replicates the namespace subtree ``subtree`` to the tomus cluster at ``target``."""
    from tomus.services.runner import submit

    params = {"subtree": "/" + subtree.strip("/"), "target": target, "options": options or {}}
    return submit(
        client,
        dask,
        "replicate",
        params,
        name=f"replicate {params['subtree']} to {target}",
        retries=retries,
    )


def run(ctx: ServiceContext) -> dict[str, Any]:
    """The replicate service, on a storage worker: calls the geo-replication engine.

    The engine is to be called here with ``ctx.client`` (the source cluster),
    ``ctx.params["subtree"]``, ``ctx.params["target"]`` and ``ctx.params["options"]``, passing
    ``ctx.progress`` for progress, and its summary returned as the service's result.
    """
    raise ServiceError(
        "geo-replication is not available in this build: the replicate service has no engine "
        f"to call (subtree {ctx.params.get('subtree')}, target {ctx.params.get('target')})"
    )
