"""SGLang's admission check for a request whose client sent ``ignore_eos`` (no radix cache).

Read (paraphrased, no code copied) from the sglang 0.5.7 wheel,
``python/sglang/srt/managers/schedule_policy.py``: ``PrefillAdder.add_one_req`` hands a request
with ``sampling_params.ignore_eos`` to ``add_one_req_ignore_eos`` when the tree cache is
disabled (``--disable-radix-cache``: ``getattr(tree_cache, "disable", True)``). That check does
not use ``new_token_ratio`` for such requests; it walks the requests' futures:

- the request is refused (NO_TOKEN) at once when its extend, rounded up to pages, exceeds
  the smaller of the free tokens left this pass and the ratio budget (``rem_total_tokens``);
- every running request, every request admitted this pass and the new one is a pair
  (tokens still to generate, tokens held): to generate = max_new_tokens × (1 for an
  ``ignore_eos`` request, else ``new_token_ratio``) − generated, held = prompt + generated;
  pairs with nothing left to generate drop out;
- sorted by tokens to generate, ascending: at the i-th of n, the n − i requests still
  running each need that many more tokens, out of the free tokens (less this pass's and
  the new extend) plus what the i earlier ones freed when they ended; admission needs more
  than ``IGNORE_EOS_RESERVE_TOKENS`` (1) per request left at every point.

When it passes, the budgets are charged as on the ordinary path (``_update_prefill_budget``).
"""

from __future__ import annotations


def ignore_eos_fits(new_left: float, new_held: int, others: list[tuple[float, int]],
                    free_now: float, extend_pages: int, rem_total: float,
                    reserve_tokens: int) -> bool:
    """Whether ``add_one_req_ignore_eos`` admits the request.

    Args:
        new_left, new_held: the new request's tokens still to generate and tokens held
            (its prompt), tokens.
        others: (to generate, held) of the running requests and of those admitted in this
            pass, tokens.
        free_now: free KV tokens less what this pass admitted (``cur_rem_tokens``).
        extend_pages: the new request's extend rounded up to whole pages, tokens.
        rem_total: free KV tokens less the running requests' ratio charge and this pass's
            (``rem_total_tokens``).
        reserve_tokens: ``IGNORE_EOS_RESERVE_TOKENS``, tokens per request still running.

    Returns:
        True if admitted; False for SGLang's NO_TOKEN.
    """
    if extend_pages > min(free_now, rem_total):
        return False
    # SGLang lists the new request first, then the others, and sorts stably by to-generate
    states = sorted([s for s in [(new_left, new_held), *others] if s[0] > 0],
                    key=lambda s: s[0])
    free, freed, n = free_now - extend_pages, 0, len(states)
    for i, (left, held) in enumerate(states):
        running = n - i
        if free + freed - left * running <= reserve_tokens * running:
            return False
        freed += held
    return True
