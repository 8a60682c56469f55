"""The scatter step: which site processes which units of the initial data.

A job's initial data are cut into units (A-Brain: SNP blocks; MostFrequentWords: pieces of the
input files cut at line ends). ``plan`` gives each site a share of the units: by default
proportional to its weight (its worker count, or the ``share`` of the sites file) in
contiguous runs, so each site reads long ranges and a site's part is easy to name; or, when
the user gives one, an explicit assignment (site -> unit indexes), checked to cover every unit
exactly once. Sites with weight 0 get nothing.

Rounding uses the largest remainders, so the shares always add up to the units and no site is
more than one unit away from its exact proportion.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["parse_shares", "plan"]


def _proportional(units: int, weights: Mapping[str, float]) -> dict[str, list[int]]:
    if not weights:
        raise ValueError("no site to scatter the data to (none is up)")
    total = sum(weights.values())
    if total <= 0:
        raise ValueError(f"site weights must not all be zero: {dict(weights)}")
    exact = {n: units * w / total for n, w in weights.items()}
    counts = {n: int(e) for n, e in exact.items()}
    left = units - sum(counts.values())
    # Largest remainders first; ties to the earlier site (the order of the sites file).
    order = sorted(weights, key=lambda n: -(exact[n] - counts[n]))
    for n in order[:left]:
        counts[n] += 1
    out, start = {}, 0
    for n in weights:
        out[n] = list(range(start, start + counts[n]))
        start += counts[n]
    return out


def plan(
    units: int,
    weights: Mapping[str, float],
    assignment: Mapping[str, Sequence[int]] | None = None,
) -> dict[str, list[int]]:
    """Site -> the unit indexes it processes (every unit once). ``weights``: the sites that
    may take work, in order. ``assignment``: the user's own plan, used as given."""
    if units < 0:
        raise ValueError(f"negative number of units: {units}")
    if assignment is None:
        return _proportional(units, weights)
    unknown = set(assignment) - set(weights)
    if unknown:
        raise ValueError(f"assignment names sites that are not available: {sorted(unknown)}")
    seen: dict[int, str] = {}
    for site, idx in assignment.items():
        for i in idx:
            if not 0 <= i < units:
                raise ValueError(f"assignment gives {site} unit {i}; units are 0..{units - 1}")
            if i in seen:
                raise ValueError(f"assignment gives unit {i} to both {seen[i]} and {site}")
            seen[i] = site
    if len(seen) != units:
        lost = sorted(set(range(units)) - set(seen))
        raise ValueError(f"assignment leaves units {lost} to no site")
    return {n: sorted(assignment.get(n, ())) for n in weights}


def parse_shares(specs: Sequence[str]) -> dict[str, float]:
    """``["paris=2", "lyon=1"]`` -> {"paris": 2.0, "lyon": 1.0} (the CLI's ``--share``)."""
    out: dict[str, float] = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        try:
            w = float(value)
        except ValueError:
            w = -1.0
        if not sep or not name or w < 0:
            raise ValueError(f"--share wants SITE=WEIGHT (a non-negative number), got {spec!r}")
        out[name] = w
    return out
