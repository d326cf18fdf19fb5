"""Each request's outcome, written once when it ends, into numpy columns indexed by rid.

The run keeps no :class:`~capsim.engine.request.Request` after it has finished
or been rejected: :meth:`RequestLog.record` copies what the result needs
(times, replica, preemptions, status, the reason of a rejection) and checks
the request's token and gap invariants there and then. Memory: 49 bytes per request of
the trace, allocated at the start (a closed loop bounded by time grows them as
it draws rows), plus the reason strings of rejected ones.

Warm-up requests (``workload.warmup_request_count``: the first K sent) end like
any other but their status in the result is :data:`WARMUP`, so that every metric
leaves them out (:mod:`capsim.metrics.summary`).
"""

from __future__ import annotations

import numpy as np

from capsim.engine.request import FINISHED as _FINISHED_STATE
from capsim.engine.request import REJECTED as _REJECTED_STATE
from capsim.engine.request import Request
from capsim.results.model import FINISHED, REJECTED, RequestRecords
from capsim.workload import RequestTrace

_OPEN, _DONE, _REJECTED = 0, 1, 2          # status codes: not ended yet, finished, rejected

WARMUP = "warmup"
"""``RequestRecords.status`` of a warm-up request (finished or rejected): simulated, measured
by no metric. Next to :data:`~capsim.results.model.FINISHED` and ``REJECTED``."""


class RequestLog:
    """Outcome columns for ``num_requests`` requests (rids ``0 … num_requests − 1``).

    Attributes:
        written: requests recorded so far.
        gaps_expected: Σ over finished requests of ``n × (output_tokens − 1)``, the
            inter-token gaps they must have produced.
    """

    def __init__(self, num_requests: int):
        n = num_requests
        self.arrival_s = np.full(n, np.nan)
        self.first_scheduled_s = np.full(n, np.nan)
        self.first_token_s = np.full(n, np.nan)
        self.finish_s = np.full(n, np.nan)
        self.max_itl_s = np.full(n, np.nan)
        self.replica = np.full(n, -1, dtype=np.int32)
        self.num_preemptions = np.zeros(n, dtype=np.int32)
        self.status = np.zeros(n, dtype=np.int8)
        self.reasons: dict[int, str] = {}        # rid → reject reason (rejected requests only)
        self.written = 0
        self.gaps_expected = 0
        self.warmup: set[int] = set()            # rids of warm-up requests
        self._problems: list[str] = []

    def mark_warmup(self, rid: int) -> None:
        """Request ``rid`` (just sent) is warm-up: its result status will be :data:`WARMUP`."""
        self.warmup.add(rid)

    def grow(self, num_requests: int) -> None:
        """Room for rids up to ``num_requests − 1`` (a closed loop drew more rows)."""
        extra = num_requests - len(self.status)
        if extra <= 0:
            return
        for name in ("arrival_s", "first_scheduled_s", "first_token_s", "finish_s", "max_itl_s",
                     "replica", "num_preemptions", "status"):
            col = getattr(self, name)
            fill = {"replica": -1, "num_preemptions": 0, "status": _OPEN}.get(name, np.nan)
            setattr(self, name, np.concatenate([col, np.full(extra, fill, dtype=col.dtype)]))

    def truncate(self, num_requests: int) -> None:
        """Keep rids below ``num_requests`` only (the rows a closed loop never sent)."""
        for name in ("arrival_s", "first_scheduled_s", "first_token_s", "finish_s", "max_itl_s",
                     "replica", "num_preemptions", "status"):
            setattr(self, name, getattr(self, name)[:num_requests])

    def record(self, req: Request) -> None:
        """Write ``req``'s outcome (it has just finished or been rejected) and check it.

        A finished request must have emitted exactly ``output_tokens`` and, with more
        than one, a longest gap between its TPOT and E2EL − TTFT; a request must end
        once, finished or rejected. Violations are kept for
        :meth:`problems`.
        """
        rid = req.rid
        if self.status[rid] != _OPEN:
            self._problems.append(f"request {rid} ended twice")
            return
        if req.state == _FINISHED_STATE:
            code = _DONE
            if req.num_generated != req.output_tokens:
                self._problems.append(f"request {rid} emitted {req.num_generated} of "
                                      f"{req.output_tokens} tokens")
            elif req.output_tokens > 1:
                self._check_gaps(req)
            self.gaps_expected += req.n * (req.output_tokens - 1)
        elif req.state == _REJECTED_STATE:
            code = _REJECTED
        else:
            self._problems.append(f"request {rid} ended {req.state}, neither finished "
                                  "nor rejected")
            return
        if req.reject_reason:
            self.reasons[rid] = req.reject_reason
        self.status[rid] = code
        self.arrival_s[rid] = req.arrival_s
        self.first_scheduled_s[rid] = req.first_scheduled_s
        self.first_token_s[rid] = req.first_token_s
        self.finish_s[rid] = req.finish_s
        self.max_itl_s[rid] = req.max_itl_s
        self.replica[rid] = req.replica
        self.num_preemptions[rid] = req.num_preemptions
        self.written += 1

    def _check_gaps(self, req: Request) -> None:
        """Its gaps (one per streamed chunk, timed at the client) add up to E2EL − TTFT, so
        the longest lies between their mean over its tokens (TPOT) and their sum."""
        span_s = req.finish_s - req.first_token_s
        slack_s = 1e-9 * span_s + 1e-12          # float rounding of the sums of step times
        tpot_s = span_s / (req.output_tokens - 1)
        if not tpot_s - slack_s <= req.max_itl_s <= span_s + slack_s:
            self._problems.append(f"request {req.rid}: longest gap {req.max_itl_s:.9g} s "
                                  f"outside [TPOT {tpot_s:.9g} s, E2EL − TTFT {span_s:.9g} s]")

    def add_lost_gaps(self, gaps: int) -> None:
        """Inter-token gaps streamed by attempts that a replica failure cut short (their
        tokens were streamed, then the request started over or failed)."""
        self.gaps_expected += gaps

    def problems(self) -> list[str]:
        """Broken invariants found so far, then the first request never recorded (if any)."""
        out = list(self._problems)
        if self.written != len(self.status):
            rid = int(np.flatnonzero(self.status == _OPEN)[0])
            out.append(f"request {rid} neither finished nor rejected "
                       f"({self.written} of {len(self.status)} requests ended)")
        return out

    def records(self, trace: RequestTrace) -> RequestRecords:
        """The result's per-request table. The log's columns are handed over (not copied);
        class, prompt and output tokens and ``n`` are the trace's (read-only) arrays (``trace``
        has as many rows as the log). Status: finished, rejected or, for the warm-up
        requests, :data:`WARMUP`."""
        n = len(self.status)
        reasons = np.full(n, "", dtype=object)
        for rid, reason in self.reasons.items():
            reasons[rid] = reason
        status = np.where(self.status == _DONE, FINISHED, REJECTED)
        if self.warmup:
            status[np.fromiter(self.warmup, dtype=np.int64, count=len(self.warmup))] = WARMUP
        return RequestRecords(
            request_id=np.arange(n, dtype=np.int64), class_id=trace.class_id,
            replica=self.replica, arrival_s=self.arrival_s,
            prompt_tokens=trace.prompt_tokens, output_tokens=trace.output_tokens,
            status=status, reject_reason=reasons,
            first_scheduled_s=self.first_scheduled_s, first_token_s=self.first_token_s,
            finish_s=self.finish_s, num_preemptions=self.num_preemptions, n=trace.n,
            max_itl_s=self.max_itl_s)
