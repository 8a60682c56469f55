"""User services: a Python function run on a storage node, next to the data it processes.

``submit_function(client, dask, fn, *args, paths=[...])`` runs ``fn(ctx, *args)`` as a service:
on a Dask worker started on a storage node (``storage`` resource), preferably one on a host
holding ``paths``. ``ctx`` (a ``ServiceContext``) gives the function the cluster's client
(``ctx.client``, ``ctx.fs``), its input paths, where it runs (``ctx.worker``, ``ctx.host``),
its attempt number and ``ctx.progress(done, total)``. Whatever it returns (JSON-able) is the
service's result; files it writes through ``ctx.client`` are its output.

From the command line the function is named ``module:attribute`` and imported on the worker
(``tomus service submit function --function mypkg.jobs:summarize --paths '/results/*'``), so
the module must be importable there.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import tomus

if TYPE_CHECKING:
    from distributed import Client as DaskClient

    from tomus.services.runner import Service, ServiceContext

__all__ = ["load_function", "run_named", "submit_function"]


def load_function(name: str) -> Callable[..., Any]:
    """The callable ``module:attribute`` names (attribute may be dotted)."""
    module, sep, attr = name.partition(":")
    if not sep or not module or not attr:
        raise tomus.InvalidArgument(f"function {name!r}: expected module:attribute")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise tomus.InvalidArgument(f"{name} is not callable")
    return obj  # type: ignore[no-any-return]


def run_named(ctx: ServiceContext) -> Any:
    """A ``function`` service whose callable was given by name (the CLI's way)."""
    fn = load_function(ctx.params["function"])
    return fn(ctx, *ctx.params.get("args", []))


def submit_function(
    client: tomus.Client,
    dask: DaskClient,
    fn: Callable[..., Any] | str,
    *args: Any,
    paths: Sequence[str] = (),
    name: str = "",
    retries: int = 0,
) -> Service:
    """Runs ``fn(ctx, *args)`` on a storage node (``fn`` a callable, or ``module:attribute``)."""
    from tomus.services.compress import resolve
    from tomus.services.runner import submit

    inputs = resolve(client, list(paths)) if paths else []
    if isinstance(fn, str):
        load_function(fn)  # fail now, not on the worker, if it cannot be found here
        return submit(
            client,
            dask,
            "function",
            {"function": fn, "args": list(args)},
            paths=inputs,
            name=name or fn,
            retries=retries,
        )
    return submit(
        client, dask, "function", {}, fn=fn, args=args, paths=inputs, name=name, retries=retries
    )
