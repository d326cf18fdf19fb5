"""Fleet options for ``capsim size``: a variant on one GPU at one TP × PP shape, and its floors.

:func:`fleet_options` resolves every variant × hardware × TP × PP choice through
the scenario loader (so every memory and sharding rule applies);
:func:`fleet_at` turns a searched replica count into a fleet (the hook where
prefill + decode pools of disaggregated variants will go);
:func:`slo_floors_ms` gives the latencies no number of replicas can beat.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from capsim.scenario.load import LoadedScenario, load
from capsim.scenario.run_config import RunConfig
from capsim.common.errors import ScenarioError
from capsim.profiles.hardware import hardware_names, load_hardware
from capsim.scenario.paths import locate
from capsim.cost.operators import attn_pairs

#: Why a disaggregated variant gets no answer to ``--gpus N`` (capacity): that search
#: holds a fleet fixed and varies the rate, and N GPUs split many ways between the pools.
DISAGG_NOT_SIZED = ("disaggregated (prefill + decode pools): the capacity of N GPUs (--gpus) "
                    "is not searched for a split fleet; size it at a rate (--rate)")


@dataclass(frozen=True)
class PoolSplit:
    """A disaggregated option's pools: each pool's parallel shape, the KV link, and the
    prefill:decode replica ratio its search starts along (``ratio`` (1, 2): 1P2D)."""

    prefill: str                  # the prefill pool's shape, e.g. "TP4" or "TP8 EP"
    decode: str
    prefill_gpus: int             # GPUs of one prefill replica (TP × PP)
    decode_gpus: int
    link: str
    ratio: tuple[int, int] = (1, 1)

    @property
    def label(self) -> str:
        """``P TP4 + D TP8 · nvlink-4``, with ``from 1P2D`` off the default ratio."""
        start = "" if self.ratio == (1, 1) else f" from {self.ratio[0]}P{self.ratio[1]}D"
        return f"P {self.prefill} + D {self.decode} · {self.link}{start}"

    @property
    def unit_gpus(self) -> int:
        """GPUs of one step along the ratio: x prefill and y decode replicas."""
        return self.ratio[0] * self.prefill_gpus + self.ratio[1] * self.decode_gpus

    def gpus(self, prefill_replicas: int, decode_replicas: int) -> int:
        return prefill_replicas * self.prefill_gpus + decode_replicas * self.decode_gpus


def pool_shape_label(pool) -> str:
    """A resolved pool's parallel shape: ``TP4``, ``TP8×PP2``, ``TP8 EP DPA``."""
    e = pool.engine
    return " ".join([shape_label(e.tensor_parallel_size, e.pipeline_parallel_size)]
                    + ["EP"] * bool(e.enable_expert_parallel)
                    + ["DPA"] * bool(e.enable_dp_attention))


def split_of(run: RunConfig, ratio: tuple[int, int] = (1, 1)) -> PoolSplit | None:
    """The :class:`PoolSplit` of a disaggregated ``run`` (None when co-located)."""
    if not run.disaggregated:
        return None
    pre, dec = run.pool("prefill"), run.pool("decode")
    return PoolSplit(pool_shape_label(pre), pool_shape_label(dec), pre.engine.gpus_per_replica,
                     dec.engine.gpus_per_replica, run.transfer.link.name, ratio)


@dataclass(frozen=True)
class FleetOption:
    """One configuration to size: a variant on one GPU profile at one TP × PP shape.

    ``run`` is None and ``problem`` says why when the option cannot run at all
    (the model does not fit, TP does not divide the heads, PP exceeds the layers, an
    SLO floor).
    """

    variant: str
    hardware: str
    tensor_parallel_size: int
    run: RunConfig | None
    problem: str = ""
    pipeline_parallel_size: int = 1
    split: PoolSplit | None = None      # a disaggregated option's pools (None: co-located)

    @property
    def key(self) -> tuple:
        """(variant, hardware, TP, PP), and the :class:`PoolSplit` of a split option."""
        base = (self.variant, self.hardware, self.tensor_parallel_size,
                self.pipeline_parallel_size)
        return base if self.split is None else (*base, self.split)

    @property
    def gpus_per_replica(self) -> int:
        """TP × PP: the GPUs of one replica (the unit the search counts in); for a split,
        the GPUs of one step along its ratio."""
        if self.split is not None:
            return self.split.unit_gpus
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def label(self) -> str:
        """E.g. ``chunked · h100-sxm TP1``, ``pp · h100-sxm TP4×PP2``,
        ``disagg · h100-sxm P TP4 + D TP8 · nvlink-4``."""
        if self.split is not None:
            return f"{self.variant} · {self.hardware} {self.split.label}"
        shape = shape_label(self.tensor_parallel_size, self.pipeline_parallel_size)
        return f"{self.variant} · {self.hardware} {shape}"


def shape_label(tp: int, pp: int) -> str:
    """``TP4``, or ``TP4×PP2`` with pipeline stages."""
    return f"TP{tp}×PP{pp}" if pp > 1 else f"TP{tp}"


def check_hardware_names(base: LoadedScenario, hardware: list[str] | None) -> None:
    """Every GPU of ``sizing.hardware`` (``hardware``) names a profile.

    Raises:
        ScenarioError: an unknown name or a bad profile file, at ``sizing.hardware.<i>``.
    """
    for i, name in enumerate(hardware or []):
        try:
            load_hardware(locate(name, base.path.parent, kind="hardware",
                                 shipped=hardware_names(), what="a GPU profile YAML"))
        except ScenarioError as exc:
            raise exc.with_context(file=str(base.path), path=f"sizing.hardware.{i}") from None


def fleet_options(base: LoadedScenario, overrides: list[str], hardware: list[str] | None,
                  tps: list[int] | None, pps: list[int] | None = None) -> list[FleetOption]:
    """Every variant × hardware × TP × PP choice (None: each variant's own), loaded and
    resolved (a PP that exceeds the layers, or a TP × PP wider than the node where the
    GPUs must share one, makes that option infeasible with the loader's message).

    Raises:
        ScenarioError: an unknown hardware name in ``hardware``.
    """
    check_hardware_names(base, hardware)
    out = []
    for hw in hardware or [None]:
        for tp in tps or [None]:
            for pp in pps or [None]:
                out.extend(_options_for(base, overrides, hw, tp, pp))
    return out


def _options_for(base: LoadedScenario, overrides: list[str], hw: str | None,
                 tp: int | None, pp: int | None = None) -> list[FleetOption]:
    extra = _choice_overrides(base, hw, tp, pp)
    try:
        loaded = load(base.path, overrides + extra, base.spec.seed)
    except ScenarioError as exc:
        where = _choice_path(exc.path, tp, pp)
        problem = f"{where}: {exc.message}" if where else exc.message   # file said once
        return [FleetOption(rc.variant, hw or rc.serving_pool.hardware.name,
                            tp or rc.serving_pool.engine.tensor_parallel_size, None, problem,
                            pp or rc.serving_pool.engine.pipeline_parallel_size)
                for rc in base.runs]
    return [FleetOption(rc.variant, rc.serving_pool.hardware.name,
                        rc.serving_pool.engine.tensor_parallel_size, rc,
                        pipeline_parallel_size=rc.serving_pool.engine.pipeline_parallel_size,
                        split=split_of(rc))
            for rc in loaded.runs]


def _choice_path(path: str | None, tp: int | None, pp: int | None) -> str | None:
    """Where an option's error is the user's to mend: a TP / PP the ``sizing:`` list
    chose is ``sizing.tensor_parallel_size`` (``pipeline_parallel_size``), not the
    engine field the choice was written into."""
    for field, chosen in (("tensor_parallel_size", tp), ("pipeline_parallel_size", pp)):
        if chosen is not None and path is not None and path.endswith(f"engine.{field}"):
            return f"sizing.{field}"
    return path


def _choice_overrides(base: LoadedScenario, hw: str | None, tp: int | None,
                      pp: int | None = None) -> list[str]:
    """``--set`` strings putting every variant on ``hw`` at TP ``tp`` and PP ``pp`` (over
    their own choices)."""
    out = []
    if hw is not None:
        out.append(f"hardware={hw}")
        out += [f"variants.{i}.hardware={hw}" for i, v in enumerate(base.spec.variants)
                if v.hardware is not None]
    if tp is not None:
        out.append(f"engine.tensor_parallel_size={tp}")
        out += [f"variants.{i}.engine.tensor_parallel_size={tp}"
                for i, v in enumerate(base.spec.variants) if "tensor_parallel_size" in v.engine]
    if pp is not None:
        out.append(f"engine.pipeline_parallel_size={pp}")
        out += [f"variants.{i}.engine.pipeline_parallel_size={pp}"
                for i, v in enumerate(base.spec.variants) if "pipeline_parallel_size" in v.engine]
    return out


def fleet_at(run: RunConfig, replicas: int | tuple[int, int]) -> RunConfig:
    """``run`` with ``replicas`` engine replicas (GPUs = replicas × TP × PP), or for a
    disaggregated ``run`` a ``(prefill, decode)`` pair of pool sizes.

    The one place that turns a searched count into a fleet.

    Raises:
        ValueError: a pair for a co-located run, or a count for a disaggregated one.
    """
    if isinstance(replicas, tuple) != run.disaggregated:
        raise ValueError(f"{run.variant}: give (prefill, decode) replicas exactly when the "
                         f"variant is disaggregated, got {replicas!r}")
    if isinstance(replicas, tuple):
        pre, dec = run.pool("prefill"), run.pool("decode")
        return replace(run, pools=(replace(pre, num_replicas=replicas[0]),
                                   replace(dec, num_replicas=replicas[1])))
    return run.with_replicas(replicas)


def slo_floors_ms(run: RunConfig, min_prompt_tokens: int) -> dict[str, float]:
    """Lower bounds of latency metrics that no number of replicas can beat, ms.

    - ITL / TPOT: one decode step of a single sequence at context 1.
    - TTFT: the shortest prompt of the trace prefilled in one step, alone.

    Both from the roofline (:class:`capsim.cost.pricer.StepPricer`); adding
    sequences, context or chunks only lengthens steps. A disaggregated run's ITL floor is
    its decode pool's step, its TTFT floor its prefill pool's.
    """
    split = run.disaggregated
    pricer = run.pool("decode" if split else "colocated").pricer(run.model)
    decode = pricer.cost(decode_seqs=1, decode_ctx_tokens=1, logits_seqs=1).seconds * 1e3
    p = int(min_prompt_tokens)
    pricer = run.pool("prefill").pricer(run.model) if split else pricer
    prefill = pricer.cost(prefill_tokens=p, prefill_attn_pairs=attn_pairs(p, 0),
                          prefill_kv_tokens=p, logits_seqs=1).seconds * 1e3
    return {"itl": decode, "tpot": decode, "ttft": prefill}


def unreachable(targets: dict[str, float], floors_ms: dict[str, float]) -> list[str]:
    """Targets below their floor, e.g. ``["itl_p99_ms ≤ 2 but one decode step takes 4.7 ms"]``."""
    out = []
    for name, bound in targets.items():
        prefix = name.split("_")[0]
        if name.endswith("_ms") and prefix in floors_ms and bound < floors_ms[prefix]:
            what = ("a lone prefill of the shortest prompt" if prefix == "ttft"
                    else "one decode step")
            out.append(f"slo.targets.{name} ≤ {bound:g} but {what} takes "
                       f"{floors_ms[prefix]:.3g} ms")
    return out
