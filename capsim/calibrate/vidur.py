"""Read Microsoft Vidur's profiling CSVs as they are published (MIT licence).

Layout (Vidur repo ``data/profiling/``, copied to ``../shared/reference/vidur_profiling``;
columns described in that folder's README):

- ``compute/<device>/<org>/<model>/mlp.csv``: per-layer operator times (ms,
  ``time_stats.<op>.median``) of one TP shard at ``num_tokens`` tokens:
  ``attn_pre_proj`` (QKV GEMM), ``attn_post_proj`` (O), ``mlp_up_proj``
  (gate+up), ``mlp_down_proj`` and the elementwise kernels
  ``input_layernorm``, ``post_attention_layernorm``, ``attn_rope``,
  ``mlp_act``, ``add``.
- ``attention.csv`` (``compute/<device>/...`` upstream; one older A100 file
  under ``history/acb95f6/data/profiling/a100/``): ``attn_prefill`` rows
  (``prefill_chunk_size`` on ``kv_cache_size`` cached tokens, ``batch_size``
  sequences) and ``attn_decode`` rows (``batch_size`` sequences at
  ``kv_cache_size`` context each).
- ``network/<node>/all_reduce.csv``: ``size`` bytes over ``num_workers`` GPUs,
  ``devices_per_node`` of them on one node.

Vidur reads ``*.median`` as its training target; so do we. Files whose model
has no gated MLP (phi-2) are skipped: capsim prices gated-MLP shapes only.

Public API:
    VidurData, read_mlp_csv, read_attention_csv, read_all_reduce_csv, load_vidur,
    DEVICES
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from capsim.calibrate.observations import Observations, concat, empty, from_model_rows
from capsim.common.errors import ScenarioError
from capsim.profiles.models import ModelShape

#: capsim profile → (Vidur compute device folder, Vidur network node folder).
DEVICES = {"a100-80gb": ("a100", "a100_dgx"), "h100-sxm": ("h100", "h100_dgx")}

#: Vidur mlp.csv GEMM columns → capsim operator names.
GEMM_OPS = {"attn_pre_proj": "qkv_proj", "attn_post_proj": "o_proj",
            "mlp_up_proj": "gate_up_proj", "mlp_down_proj": "down_proj"}

#: Vidur mlp.csv kernels that together make capsim's per-layer ``elementwise`` operator.
ELEMENTWISE_OPS = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add")

MS = 1e-3


@dataclass(frozen=True)
class VidurData:
    """The observations read from one Vidur folder for one device, and the files used."""

    observations: Observations
    files: tuple[str, ...]


def _read(path: Path, needed: tuple[str, ...]) -> pd.DataFrame:
    try:
        frame = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"cannot read Vidur CSV: {exc}", file=str(path)) from None
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise ScenarioError(f"not a Vidur profiling CSV: missing columns {', '.join(missing)}",
                            file=str(path))
    return frame


def _mlp_shape(frame: pd.DataFrame, name: str) -> ModelShape:
    first = frame.iloc[0]
    return ModelShape(name=name, hidden_size=int(first.n_embd),
                      intermediate_size=int(first.n_expanded_embd), num_hidden_layers=1,
                      num_attention_heads=int(first.n_head), num_key_value_heads=int(first.n_kv_head),
                      vocab_size=int(first.vocab_size), max_position_embeddings=4096)


def read_mlp_csv(path: Path, group: str | None = None) -> Observations:
    """GEMM and elementwise observations from one Vidur ``mlp.csv``.

    One observation per row and GEMM (``time_stats.<op>.median`` ms → s), and
    one ``elementwise`` observation per row summing the five elementwise
    kernels. ``group`` defaults to the model folder name (``Meta-Llama-3-8B``).
    Returns an empty table for a non-gated model (phi-2).

    Raises:
        ScenarioError: unreadable file or missing columns.
    """
    path = Path(path)
    needed = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size",
              "use_gated_mlp", "num_tokens", "num_tensor_parallel_workers")
    frame = _read(path, needed + tuple(f"time_stats.{op}.median" for op in GEMM_OPS))
    if not bool(frame.use_gated_mlp.iloc[0]) or not all(
            f"time_stats.{op}.median" in frame.columns for op in ELEMENTWISE_OPS):
        return empty()
    group = group or path.parent.name
    model = _mlp_shape(frame, group)
    tokens = frame.num_tokens.to_numpy()
    tp = frame.num_tensor_parallel_workers.to_numpy()
    zeros, ones = np.zeros(len(frame)), np.ones(len(frame))
    parts = [from_model_rows(model, np.full(len(frame), ours), tokens, zeros, ones, tp,
                             frame[f"time_stats.{op}.median"].to_numpy() * MS,
                             group=group, source=str(path))
             for op, ours in GEMM_OPS.items()]
    elementwise_s = sum(frame[f"time_stats.{op}.median"].to_numpy() for op in ELEMENTWISE_OPS) * MS
    parts.append(from_model_rows(model, np.full(len(frame), "elementwise"), tokens, zeros, ones,
                                 tp, elementwise_s, group=group, source=str(path)))
    return concat(parts)


def read_attention_csv(path: Path, group: str | None = None) -> Observations:
    """attention_prefill and attention_decode observations from a Vidur ``attention.csv``.

    Prefill rows: ``batch_size`` sequences, each a chunk of ``prefill_chunk_size``
    on ``kv_cache_size`` cached tokens, time ``attn_prefill.median``. Decode
    rows: ``batch_size`` sequences at ``kv_cache_size`` context,
    ``attn_decode.median``. The head layout (``n_embd``, ``n_q_head``,
    ``n_kv_head``) and TP degree come from each row.

    Raises:
        ScenarioError: unreadable file or missing columns.
    """
    path = Path(path)
    needed = ("n_embd", "n_q_head", "n_kv_head", "num_tensor_parallel_workers", "batch_size",
              "prefill_chunk_size", "kv_cache_size", "is_prefill",
              "time_stats.attn_prefill.median", "time_stats.attn_decode.median")
    frame = _read(path, needed)
    parts = []
    keys = ["n_embd", "n_q_head", "n_kv_head"]
    for (h, heads, kv_heads), rows in frame.groupby(keys):
        model = ModelShape(name=f"attn-h{h}-q{heads}-kv{kv_heads}", hidden_size=int(h),
                           intermediate_size=1, num_hidden_layers=1,
                           num_attention_heads=int(heads), num_key_value_heads=int(kv_heads),
                           vocab_size=1, max_position_embeddings=1 << 20)
        prefill = rows.is_prefill.astype(str).str.lower() == "true"
        for is_prefill, kind in ((True, "prefill"), (False, "decode")):
            sel = rows[prefill == is_prefill]
            sel = sel[sel[f"time_stats.attn_{kind}.median"] > 0]
            if not len(sel):
                continue
            parts.append(from_model_rows(
                model, np.full(len(sel), f"attention_{kind}"),
                sel.prefill_chunk_size.to_numpy(), sel.kv_cache_size.to_numpy(),
                sel.batch_size.to_numpy(), sel.num_tensor_parallel_workers.to_numpy(),
                sel[f"time_stats.attn_{kind}.median"].to_numpy() * MS,
                group=group or model.name, source=str(path)))
    return concat(parts)


def read_all_reduce_csv(path: Path, group: str | None = None) -> Observations:
    """all_reduce observations from a Vidur network ``all_reduce.csv``.

    Keeps the rows whose GPUs are all on one node (``devices_per_node ==
    num_workers``: NVLink / NVSwitch); cross-node rows are a different link.
    ``bytes`` = ``size``, ``workers`` = ``num_workers``.

    Raises:
        ScenarioError: unreadable file or missing columns.
    """
    path = Path(path)
    frame = _read(path, ("size", "num_workers", "devices_per_node",
                         "time_stats.all_reduce.median"))
    rows = frame[(frame.devices_per_node == frame.num_workers)
                 & (frame["time_stats.all_reduce.median"] > 0)]
    n = len(rows)
    return pd.DataFrame({
        "op_class": "all_reduce", "operator": "all_reduce", "flops": np.zeros(n),
        "bytes": rows["size"].to_numpy(dtype=float), "tokens": np.zeros(n),
        "context": np.zeros(n), "batch": np.ones(n), "keys_per_query": np.zeros(n),
        "kernels": np.ones(n),
        "workers": rows.num_workers.to_numpy(dtype=float),
        "time_s": rows["time_stats.all_reduce.median"].to_numpy() * MS,
        "group": [group or f"{path.parent.name} n={w}" for w in rows.num_workers],
        "source": str(path)})


def _profiling_root(root: Path) -> Path:
    """``root`` may be the vidur_profiling folder, the repo, or ``data/profiling`` itself."""
    if not root.is_dir():
        raise ScenarioError("folder not found", file=str(root))
    for candidate in (root / "data" / "profiling", root):
        if (candidate / "compute").is_dir() or (candidate / "network").is_dir():
            return candidate
    raise ScenarioError("no Vidur profiling data here (expected data/profiling/compute "
                        "or network folders)", file=str(root))


def _folders(parent: Path, holding: str) -> str:
    """The folders under ``parent`` with a file matching ``holding``, for an error."""
    names = sorted(p.name for p in parent.iterdir() if p.is_dir() and next(p.glob(holding), None)) \
        if parent.is_dir() else []
    return ", ".join(names) or "none"


def load_vidur(root: Path, device: str, network: str | None,
               network_required: bool = False) -> VidurData:
    """Every observation for one device from a Vidur profiling folder.

    Args:
        root: ``vidur_profiling/`` (as in ../shared/reference), a Vidur
            checkout, or its ``data/profiling`` folder.
        device: compute folder name (``a100``, ``h100``).
        network: network node folder (``a100_dgx``), or None to skip all-reduce.
        network_required: refuse a ``network`` folder without ``all_reduce.csv`` (one the
            user named) instead of skipping it (a default).

    Returns:
        Observations from ``compute/<device>/*/*/mlp.csv``, every
        ``attention.csv`` for the device (current layout or ``history/*/``),
        and ``network/<network>/all_reduce.csv``.

    Raises:
        ScenarioError: the folder has no Vidur data, no file for ``device``, or none for
            a required ``network``.
    """
    root = Path(root)
    prof = _profiling_root(root)
    mlp = sorted((prof / "compute" / device).glob("*/*/mlp.csv"))
    attention = sorted((prof / "compute" / device).glob("*/*/attention.csv"))
    history = root if (root / "history").is_dir() else prof.parent.parent
    attention += sorted(history.glob(f"history/*/data/profiling/{device}/attention.csv"))
    net = prof / "network" / network / "all_reduce.csv" if network else None
    if network_required and net is not None and not net.is_file():
        raise ScenarioError(f"no Vidur all-reduce file for network {network!r} (looked for "
                            f"network/{network}/all_reduce.csv); valid --vidur-network here: "
                            f"{_folders(prof / 'network', 'all_reduce.csv')}", file=str(root))
    files = [*mlp, *attention] + ([net] if net is not None and net.is_file() else [])
    if not files:
        raise ScenarioError(f"no Vidur files for device {device!r} (looked for "
                            f"compute/{device}/*/*/mlp.csv and attention.csv); valid "
                            f"--vidur-device here: {_folders(prof / 'compute', '*/*/mlp.csv')}", file=str(root))
    parts = [read_mlp_csv(p) for p in mlp] + [read_attention_csv(p) for p in attention]
    if net is not None and net.is_file():
        parts.append(read_all_reduce_csv(net))
    return VidurData(concat(parts), tuple(str(p) for p in files))
