"""The topology seam (capsim.engine.cluster): the four topologies implement ``Cluster``
with the same signatures, and a run's cluster is the one its RunConfig describes."""

from __future__ import annotations

import inspect

import pytest

from capsim.engine.cluster import Cluster, FixedPool
from capsim.engine.disagg import DisaggCluster
from capsim.engine.fleet import Fleet
from capsim.engine.pooled import PooledCluster
from capsim.scenario.load import load

TOPOLOGIES = (FixedPool, Fleet, DisaggCluster, PooledCluster)
METHODS = ("admit", "invariant_problems", "assemble")


@pytest.mark.parametrize("cls", TOPOLOGIES, ids=lambda c: c.__name__)
def test_every_topology_implements_the_protocol(cls):
    for name in METHODS:
        want = list(inspect.signature(getattr(Cluster, name)).parameters)
        assert list(inspect.signature(getattr(cls, name)).parameters) == want, name


FAILING = ["cluster.failures.at=[{replica: 0, at_s: 5, repair_s: 5}]"]


@pytest.mark.parametrize("name, overrides, cls", [
    ("rag_mix", [], FixedPool), ("azure_conv_replay", FAILING, Fleet),
    ("disagg_ratio", [], DisaggCluster), ("hetero_fleet", [], PooledCluster)])
def test_a_run_builds_the_cluster_its_config_describes(scenarios_dir, name, overrides, cls):
    """Every member of the protocol is there on a built cluster (runtime_checkable
    isinstance), and the cluster is the topology the RunConfig describes."""
    from capsim.engine.clock import Environment
    from capsim.engine.recorder import ItlRecorder
    from capsim.sim.topology import Wiring, build_cluster
    runs = load(scenarios_dir / f"{name}.yaml", overrides).runs
    run = next((r for r in runs if r.disaggregated), runs[0]) if cls is DisaggCluster \
        else runs[0]
    pools = len(run.fleet.pools) if run.fleet is not None else 1

    def nothing(*_):
        return None

    cluster = build_cluster(run, Wiring(Environment(), ItlRecorder(4 * pools), 4, nothing,
                                        nothing, nothing, lambda: False, 4, 10, True, 0.1))
    assert type(cluster) is cls
    assert isinstance(cluster, Cluster)
    assert cluster.replicas and cluster.invariant_problems() == []
