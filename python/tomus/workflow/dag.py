"""Workflow DAGs: tasks that declare named input and output files, from Python or YAML.

A task is a shell command (run by ``/bin/sh`` in a task-local directory) or a Python
callable ``fn(task_dir: Path) -> None``; it reads its inputs and writes its outputs there by
name. Files live under the workflow's namespace directory (``dir``): output ``x.txt`` is
registered as ``{dir}/x.txt``. Dependencies come from names: the task producing a file runs
before those reading it. :meth:`Workflow.validate` refuses, before anything runs, an input
no task produces (naming the task that reads it), two producers of one file, and cycles.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Task", "Workflow", "WorkflowError"]


class WorkflowError(ValueError):
    """A workflow that cannot run as written."""


@dataclass
class Task:
    name: str
    command: str | None = None
    fn: Callable[[Path], None] | None = None
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    retries: int = 2


@dataclass
class Workflow:
    name: str
    dir: str
    tasks: list[Task] = field(default_factory=list)
    external: list[str] = field(default_factory=list)
    """Inputs that exist before the run (already in ``dir``), produced by no task."""

    def task(
        self,
        name: str,
        command: str | None = None,
        *,
        fn: Callable[[Path], None] | None = None,
        inputs: list[str] | None = None,
        outputs: list[str] | None = None,
        retries: int = 2,
    ) -> Task:
        t = Task(name, command, fn, list(inputs or []), list(outputs or []), retries)
        self.tasks.append(t)
        return t

    def path_of(self, name: str) -> str:
        return f"/{self.dir.strip('/')}/{name}"

    @classmethod
    def from_yaml(cls, path: str | Path) -> Workflow:
        import yaml

        data = yaml.safe_load(Path(path).read_text())
        return cls.from_dict(data, source=str(path))

    @classmethod
    def from_dict(cls, data: Any, source: str = "workflow") -> Workflow:
        if not isinstance(data, dict):
            raise WorkflowError(f"{source}: expected a mapping with name, dir and tasks")
        for key in ("name", "dir", "tasks"):
            if key not in data:
                raise WorkflowError(f"{source}: missing {key!r}")
        wf = cls(str(data["name"]), str(data["dir"]), external=list(data.get("external", [])))
        for i, t in enumerate(data["tasks"]):
            if not isinstance(t, dict) or "name" not in t or "command" not in t:
                raise WorkflowError(f"{source}: task #{i + 1} needs a name and a command")
            wf.task(
                str(t["name"]),
                str(t["command"]),
                inputs=[str(x) for x in t.get("inputs", [])],
                outputs=[str(x) for x in t.get("outputs", [])],
                retries=int(t.get("retries", 2)),
            )
        return wf

    def producers(self) -> dict[str, Task]:
        out: dict[str, Task] = {}
        for t in self.tasks:
            for o in t.outputs:
                if o in out:
                    raise WorkflowError(
                        f"file {o!r} is produced by two tasks: {out[o].name!r} and {t.name!r}"
                    )
                out[o] = t
        return out

    def validate(self) -> list[Task]:
        """Checks the DAG and returns its tasks in a running order (producers first)."""
        names = [t.name for t in self.tasks]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise WorkflowError(f"task names used twice: {sorted(dup)}")
        for t in self.tasks:
            if (t.command is None) == (t.fn is None):
                raise WorkflowError(f"task {t.name!r} needs exactly one of command and fn")
            for f in t.inputs + t.outputs:
                if not f or "/" in f or f in (".", ".."):
                    raise WorkflowError(f"task {t.name!r}: {f!r} is not a plain file name")
        prod = self.producers()
        for t in self.tasks:
            for i in t.inputs:
                if i not in prod and i not in self.external:
                    raise WorkflowError(
                        f"task {t.name!r} reads {i!r}, which no task produces "
                        f"(declare it under 'external' if it exists before the run)"
                    )
        order: list[Task] = []
        state: dict[str, int] = {}  # 1: visiting, 2: done

        def visit(t: Task, trail: list[str]) -> None:
            if state.get(t.name) == 2:
                return
            if state.get(t.name) == 1:
                cycle = [*trail[trail.index(t.name) :], t.name]
                raise WorkflowError(f"cycle between tasks: {' -> '.join(cycle)}")
            state[t.name] = 1
            for i in t.inputs:
                if i in prod:
                    visit(prod[i], [*trail, t.name])
            state[t.name] = 2
            order.append(t)

        for t in self.tasks:
            visit(t, [])
        return order
