"""Retries for network steps: exponential backoff plus a random delay, then one clear error."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tenacity import RetryError, Retrying, stop_after_attempt, wait_exponential_jitter

from trainstack.errors import NetworkError

T = TypeVar("T")


class TransientFailure(Exception):
    """Raised inside a network step to ask for another attempt."""


def with_retries(
    step: Callable[[], T],
    *,
    what: str,
    attempts: int = 4,
    initial: float = 1.0,
    max_wait: float = 30.0,
    jitter: float = 1.0,
) -> T:
    """Call ``step``; on TransientFailure wait (exponential + jitter) and try again.

    After ``attempts`` tries a NetworkError names ``what`` and the last failure.
    """
    retrying = Retrying(
        stop=stop_after_attempt(attempts),
        wait=wait_exponential_jitter(multiplier=initial, max=max_wait, jitter=jitter),
        retry=lambda state: state.outcome is not None and isinstance(state.outcome.exception(), TransientFailure),
        reraise=False,
    )
    try:
        return retrying(step)
    except RetryError as exc:
        last = exc.last_attempt.exception()
        raise NetworkError(f"{what} failed after {attempts} attempts: {last}") from None
