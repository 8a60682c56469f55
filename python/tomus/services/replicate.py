"""Geo-replication as a data service, on the geo-replication engine of ``tomus sites``.

``tomus service submit replicate --subtree /results --target HOST:PORT`` records a service of
kind ``replicate`` (params ``subtree``, ``target`` and ``options``) and runs ``run`` on a storage
worker like any other service: its attempts, progress, retries and outcome are in the service
log. The copying is the engine's (``crates/sites``, run by the source cluster's manager): the
service names the target as a site, adds the rule "replicate SUBTREE to it" (both idempotent,
so a retried attempt changes nothing) and follows the rule's lag until the site has caught up
(``options["wait"]``, default true; ``options["timeout"]`` seconds, default 3600). The rule
stays: later versions under the subtree keep flowing to the site (``tomus sites stop`` ends it).
Options: ``site`` (the site's name; default from the address), ``secret_file`` (the site's
cluster secret, a path the source manager can read) and ``rate`` (bytes/s, 0: unlimited).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
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


def site_name(target: str) -> str:
    """The site name a replicate service gives a target address (``10.0.0.5:7070`` →
    ``site-10.0.0.5-7070``)."""
    return "site-" + re.sub(r"[^A-Za-z0-9._-]", "-", target)[:58]


def _sites(addr: str, *args: str) -> str:
    """Runs ``tomus --addr ADDR sites ARGS...`` (the package's own CLI); its stdout."""
    cmd = [sys.executable, "-m", "tomus", "sites", "--addr", addr, *args]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise ServiceError(f"tomus sites {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def run(ctx: ServiceContext) -> dict[str, Any]:
    """The replicate service, on a storage worker: sets up the rule and follows its lag."""
    subtree = str(ctx.params["subtree"])
    target = str(ctx.params["target"])
    opts = dict(ctx.params.get("options") or {})
    name = str(opts.get("site") or site_name(target))
    add = ["add", name, target]
    if opts.get("secret_file"):
        add += ["--site-secret-file", str(opts["secret_file"])]
    _sites(ctx.addr, *add)
    _sites(ctx.addr, "replicate", subtree, "--to", name, "--rate", str(int(opts.get("rate", 0))))
    rule: dict[str, Any] = {}
    deadline = time.monotonic() + float(opts.get("timeout", 3600))
    while True:
        status = json.loads(_sites(ctx.addr, "status", "--json"))
        rule = next(
            (
                r
                for r in status.get("rules", {}).values()
                if r.get("site") == name and "/" + str(r.get("path", "")).strip("/") == subtree
            ),
            {},
        )
        sent = int(rule.get("versions_replicated", 0))
        behind = int(rule.get("versions_behind", 0))
        ctx.progress(sent, sent + behind, f"{rule.get('state', 'starting')}: {behind} behind")
        caught_up = bool(rule) and rule.get("state") == "caught up" and not rule.get("error")
        if caught_up or not opts.get("wait", True):
            break
        if time.monotonic() > deadline:
            raise ServiceError(
                f"{subtree} to {name} ({target}) had not caught up after "
                f"{opts.get('timeout', 3600)} s: {behind} versions behind, last error "
                f"{rule.get('error')!r}; the rule stays and keeps replicating"
            )
        time.sleep(1.0)
    return {
        "site": name,
        "target": target,
        "subtree": subtree,
        "state": rule.get("state"),
        "versions_replicated": rule.get("versions_replicated", 0),
        "bytes_replicated": rule.get("bytes_replicated", 0),
        "versions_behind": rule.get("versions_behind", 0),
    }
