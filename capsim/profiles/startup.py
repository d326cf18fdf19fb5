"""How long a new replica takes to start serving: data, not code.

One YAML file per engine under ``capsim/profiles/data/startup/``, each number with its
source. The provisioning delay of an autoscaled or repaired replica is

    node_provision_s + process_start_s + weight_bytes / storage_bandwidth_bytes_per_s
    + engine_init_s + cuda_graph_capture_s

(:meth:`StartupProfile.delay_s`); a scenario's ``cluster.autoscaling.provisioning``
overrides any term, or the whole delay with ``delay_s``.

Public API:
    StartupProfile
    load_startup(name) -> StartupProfile
"""

from __future__ import annotations


from pydantic import Field, model_validator

from capsim.common.schema import StrictModel
from capsim.profiles.files import packaged_file, packaged_names, read_yaml_mapping

_FOLDER = "startup"
TERMS = ("storage_bandwidth_bytes_per_s", "process_start_s", "engine_init_s",
         "cuda_graph_capture_s", "node_provision_s")
DEFAULT = "vllm-v1"


class StartupProfile(StrictModel):
    """The phases of bringing up one replica.

    Attributes:
        storage_bandwidth_bytes_per_s: rate the weights are read at, bytes/s, > 0.
        process_start_s: container, imports, API server, s.
        engine_init_s: engine start besides weights and graphs (compile cache, memory
            profiling, KV-cache allocation), s.
        cuda_graph_capture_s: CUDA-graph capture, s (0 with ``--enforce-eager``).
        node_provision_s: getting a GPU node, s.
        sources: one entry per term.
    """

    name: str = Field(min_length=1)
    display_name: str = ""
    storage_bandwidth_bytes_per_s: float = Field(gt=0)
    process_start_s: float = Field(ge=0)
    engine_init_s: float = Field(ge=0)
    cuda_graph_capture_s: float = Field(ge=0)
    node_provision_s: float = Field(default=0.0, ge=0)
    sources: dict[str, str]

    @model_validator(mode="after")
    def _sourced(self) -> "StartupProfile":
        missing = [t for t in TERMS if t not in self.sources]
        if missing:
            raise ValueError(f"sources has no entry for: {', '.join(missing)}")
        return self

    def delay_s(self, weight_bytes: float) -> float:
        """Seconds from the scale-up decision to serving, for ``weight_bytes`` of weights."""
        return (self.node_provision_s + self.process_start_s
                + weight_bytes / self.storage_bandwidth_bytes_per_s
                + self.engine_init_s + self.cuda_graph_capture_s)


def startup_names() -> list[str]:
    """Names of the packaged startup profiles, sorted."""
    return packaged_names(_FOLDER)


def load_startup(name: str = DEFAULT) -> StartupProfile:
    """The packaged startup profile ``name``.

    Raises:
        ScenarioError: no such profile.
    """
    with packaged_file(_FOLDER, name, "startup profile") as path:
        return StartupProfile.model_validate({"name": name, **read_yaml_mapping(path)})
