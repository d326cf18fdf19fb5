"""Each request's outcome, written once when it ends, into numpy columns indexed by rid.

The run keeps no :class:`~capsim.engine.request.Request` after it has finished
or been rejected: :meth:`RequestLog.record` copies what the result needs
(times, replica, preemptions, status, the reason of a rejection) and checks
the request's token invariant there and then. Memory: 49 bytes per request of
the trace, allocated at the start, plus the reason strings of rejected ones.
"""

from __future__ import annotations

import numpy as np

from capsim.engine.request import FINISHED as _FINISHED_STATE
from capsim.engine.request import REJECTED as _REJECTED_STATE
from capsim.engine.request import Request
from capsim.results.model import FINISHED, REJECTED, RequestRecords
from capsim.workload import RequestTrace

_OPEN, _DONE, _REJECTED = 0, 1, 2          # status codes: not ended yet, finished, rejected


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
        self._problems: list[str] = []

    def record(self, req: Request) -> None:
        """Write ``req``'s outcome (it has just finished or been rejected) and check it.

        A finished request must have emitted exactly ``output_tokens``; a request
        must end once, finished or rejected. Violations are kept for
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
        class, prompt and output tokens and ``n`` are the trace's (read-only) arrays."""
        n = len(self.status)
        reasons = np.full(n, "", dtype=object)
        for rid, reason in self.reasons.items():
            reasons[rid] = reason
        return RequestRecords(
            request_id=np.arange(n, dtype=np.int64), class_id=trace.class_id,
            replica=self.replica, arrival_s=self.arrival_s,
            prompt_tokens=trace.prompt_tokens, output_tokens=trace.output_tokens,
            status=np.where(self.status == _DONE, FINISHED, REJECTED), reject_reason=reasons,
            first_scheduled_s=self.first_scheduled_s, first_token_s=self.first_token_s,
            finish_s=self.finish_s, num_preemptions=self.num_preemptions, n=trace.n,
            max_itl_s=self.max_itl_s)
