"""Workloads: the request trace (:mod:`.trace`), synthetic generation (:mod:`.synthetic`),
CSV replay (:mod:`.replay`) and :func:`build` / :class:`TraceCache` (:mod:`.build`)."""

from capsim.workload.build import TraceCache, build
from capsim.workload.trace import RequestTrace

__all__ = ["RequestTrace", "TraceCache", "build"]
