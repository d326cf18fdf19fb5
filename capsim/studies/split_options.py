"""Disaggregated fleet options for ``capsim size``: each pool's shape × the KV link × a ratio.

``sizing.disaggregation`` (:class:`~capsim.scenario.sweep.DisaggSizing`) lists the prefill
and decode pool shapes (TP, and for a mixture-of-experts model expert parallelism and
data-parallel attention), the links and the prefill:decode ratios to try. Every variant
with a ``disaggregation:`` section becomes one option per hardware × prefill shape ×
decode shape × link × ratio, each resolved through the scenario loader (so every memory
and sharding rule applies per pool; a shape that does not fit makes that option
infeasible with the loader's message). Without ``sizing.disaggregation`` a disaggregated
variant is one option per hardware / TP choice, at its own pools' shapes and ratio 1P1D.
"""

from __future__ import annotations

from dataclasses import replace

from capsim.common.errors import ScenarioError
from capsim.profiles.links import link_names
from capsim.scenario.load import LoadedScenario, load
from capsim.scenario.sweep import DisaggSizing, PoolShape, parse_ratio
from capsim.studies.fleet import FleetOption, PoolSplit, split_of

__all__ = ["split_options", "check_disagg_sizing"]


def check_disagg_sizing(base: LoadedScenario, cfg: DisaggSizing) -> None:
    """Refuse a ``sizing.disaggregation`` no option could honour.

    Raises:
        ScenarioError: no variant is disaggregated; a pool TP above the model's attention
            heads; expert parallelism or DP attention on a dense model; an unknown link
            name — each naming its ``sizing.disaggregation.<...>`` path and what is valid.
    """
    path = str(base.path)
    if not any(v.disaggregation is not None for v in base.spec.variants):
        raise ScenarioError("no variant has a disaggregation: section for it to search; add "
                            "one (variants: [{name: split, disaggregation: {prefill: "
                            "{num_replicas: 1}, decode: {num_replicas: 1}, link: nvlink-4}}])",
                            file=path, path="sizing.disaggregation")
    model = base.runs[0].model
    for role in ("prefill", "decode"):
        for i, shape in enumerate(getattr(cfg, role) or []):
            _check_shape(shape, model, path, f"sizing.disaggregation.{role}.{i}")
    for j, name in enumerate(cfg.link or []):
        if name not in link_names():
            raise ScenarioError(f"unknown link {name!r}; valid: {', '.join(link_names())}",
                                file=path, path=f"sizing.disaggregation.link.{j}")


def _check_shape(shape: PoolShape, model, file: str, where: str) -> None:
    heads, tp = model.num_attention_heads, shape.tensor_parallel_size
    if tp > heads:
        raise ScenarioError(f"tensor_parallel_size {tp} is beyond "
                            f"{model.name}'s {heads} attention heads (a TP rank needs at least "
                            f"one); valid: a TP that divides {heads}, at most {heads}",
                            file=file, path=f"{where}.tensor_parallel_size")
    # Every option of this shape would be infeasible for the same reason (the loader's
    # rule); DP attention shards attention by rank instead, so the loader judges those.
    if heads % tp and not shape.enable_dp_attention:
        raise ScenarioError(f"tensor_parallel_size {tp} must divide num_attention_heads "
                            f"{heads} of {model.name} (each TP rank takes whole heads); "
                            f"valid: a TP that divides {heads}",
                            file=file, path=f"{where}.tensor_parallel_size")
    if model.num_experts == 0:
        for knob in ("enable_expert_parallel", "enable_dp_attention"):
            if getattr(shape, knob):
                raise ScenarioError(f"{knob}: {model.name} is dense (no experts); expert "
                                    "parallelism and DP attention apply to mixture-of-experts "
                                    "models only; valid: false", file=file,
                                    path=f"{where}.{knob}")


def split_options(base: LoadedScenario, overrides: list[str], options: list[FleetOption],
                  cfg: DisaggSizing | None, hardware: list[str] | None) -> list[FleetOption]:
    """``options`` with each disaggregated variant's options replaced by those
    ``sizing.disaggregation`` lists (``cfg``; None: kept, at ratio 1P1D).

    Raises:
        ScenarioError: see :func:`check_disagg_sizing`.
    """
    if cfg is None:
        return options
    check_disagg_sizing(base, cfg)
    split_variants = {i: v.name for i, v in enumerate(base.spec.variants)
                      if v.disaggregation is not None}
    out = [o for o in options if o.variant not in split_variants.values()]
    ratios = [parse_ratio(r) for r in cfg.ratios or ["1P1D"]]
    for hw in hardware or [None]:
        for pre in cfg.prefill or [None]:
            for dec in cfg.decode or [None]:
                for link in cfg.link or [None]:
                    extra = _overrides(list(split_variants), hw, pre, dec, link)
                    found = _load(base, overrides + extra, set(split_variants.values()),
                                  (hw, pre, dec, link))
                    out.extend(replace(o, split=replace(o.split, ratio=r)) for o in found
                               for r in ratios)
    return out


def _overrides(indices: list[int], hw: str | None, pre: PoolShape | None,
               dec: PoolShape | None, link: str | None) -> list[str]:
    """``--set`` strings putting the split variants ``indices`` on these pools and link."""
    out = [f"hardware={hw}"] if hw is not None else []
    for i in indices:
        at = f"variants.{i}.disaggregation"
        if hw is not None:
            out += [f"{at}.prefill.hardware={hw}", f"{at}.decode.hardware={hw}"]
        for role, shape in (("prefill", pre), ("decode", dec)):
            if shape is not None:
                out += [f"{at}.{role}.tensor_parallel_size={shape.tensor_parallel_size}",
                        f"{at}.{role}.engine.enable_expert_parallel="
                        f"{str(shape.enable_expert_parallel).lower()}",
                        f"{at}.{role}.engine.enable_dp_attention="
                        f"{str(shape.enable_dp_attention).lower()}"]
        if link is not None:
            out.append(f"{at}.link={link}")
    return out


def _load(base: LoadedScenario, overrides: list[str], names: set[str],
          choice: tuple) -> list[FleetOption]:
    """The split variants ``names`` loaded with ``overrides``: options, or infeasible ones
    carrying the loader's message when the pools cannot run."""
    try:
        loaded = load(base.path, overrides, base.spec.seed)
    except ScenarioError as exc:
        return [_infeasible(base, name, choice, exc.message) for name in sorted(names)]
    return [FleetOption(rc.variant, rc.serving_pool.hardware.name,
                        rc.serving_pool.engine.tensor_parallel_size, rc,
                        pipeline_parallel_size=rc.serving_pool.engine.pipeline_parallel_size,
                        split=split_of(rc))
            for rc in loaded.runs if rc.variant in names]


def _infeasible(base: LoadedScenario, name: str, choice: tuple, problem: str) -> FleetOption:
    hw, pre, dec, link = choice
    own = next(rc for rc in base.runs if rc.variant == name)
    own_split = split_of(own)
    split = PoolSplit(pre.label if pre else own_split.prefill,
                      dec.label if dec else own_split.decode,
                      pre.tensor_parallel_size if pre else own_split.prefill_gpus,
                      dec.tensor_parallel_size if dec else own_split.decode_gpus,
                      link or own_split.link)
    return FleetOption(name, hw or own.serving_pool.hardware.name,
                       dec.tensor_parallel_size if dec else
                       own.serving_pool.engine.tensor_parallel_size, None, problem,
                       split=split)
