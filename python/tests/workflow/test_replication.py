"""The replication agent: its cost model (the paper's formulas) and real extra holders for
a file with many pending readers, stopping at the cost bound."""

from __future__ import annotations

from pathlib import Path

import pytest
from workflow_support import write

import tomus
from tomus import workflow
from tomus.workflow.replication import CostModel, ReplicationAgent


def test_cost_model_follows_the_formulas() -> None:
    m = CostModel(node_price=2.0, disk_mb=1000.0, throughput_mb_s=50.0)
    assert m.cost_per_mb == pytest.approx(0.002)
    assert m.cost(3, 100.0) == pytest.approx(3 * 100 * 0.002)
    # One replica gains nothing; all nodes gain the whole transfer time.
    assert m.time_gain(1, 100.0, 5) == 0.0
    assert m.time_gain(5, 100.0, 5) == pytest.approx(2.0)
    assert m.time_gain(3, 100.0, 5) == pytest.approx(2.0 * (1 - 2 / 4))
    assert m.target(100.0, nodes=5, readers=10, have=1) == 5
    assert m.target(100.0, nodes=5, readers=3, have=1) == 3
    # The cost bound stops it: 3 replicas of 100 MB cost 0.6.
    bounded = CostModel(node_price=2.0, disk_mb=1000.0, max_cost=0.5)
    assert bounded.target(100.0, nodes=5, readers=10, have=1) == 2


def test_agent_adds_holders_up_to_the_bound(
    client: tomus.Client, providers: list[str], tmp_path: Path
) -> None:
    data = write(tmp_path / "db", 3 << 20)
    path = "/t/repl/db.bin"
    workflow.register(client, tmp_path / "db", path, provider=providers[0])
    size_mb = len(data) / 1e6
    # Priced so that 3 replicas fit the budget and 4 do not.
    model = CostModel(node_price=1.0, disk_mb=1.0, max_cost=3.5 * size_mb)
    # A work root this host does not have yet (the driver may run no task).
    work_dir = tmp_path / "absent" / "tomus-workflow-x"
    agent = ReplicationAgent(client, model, work_dir=str(work_dir))
    agent.start({path: 8}).join(timeout=60)
    assert agent.errors == []
    assert list(work_dir.iterdir()) == [], "staged copies are left"
    holders = [h["addr"] for h in workflow.registered(client, path)["holders"]]
    assert len(holders) == 3 and holders[0] == providers[0]
    assert len(agent.made) == 2
    for i, h in enumerate(holders):
        dest = tmp_path / f"from{i}"
        workflow.fetch(client, path, dest, holders=[h])
        assert dest.read_bytes() == data
    # Nothing more to do: the bound holds.
    assert agent.replicate(path, 8) == 3 and len(agent.made) == 2
