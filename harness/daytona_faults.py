"""What a Daytona fault is, read off the SDK's exceptions: retry, gone, or fatal; how long to wait; one line to log.

The `daytona` SDK (0.210.0) raises two families: `create`/`delete`/`list` raise its own
DaytonaError subclasses (`status_code`, `headers`; a refused connection is a plain
DaytonaError chained from urllib3's MaxRetryError), while `process.code_run` raises the
toolbox client's raw ApiException/ServiceException/NotFoundException (`status`, `headers`,
and a str() holding response headers and body) and urllib3's ReadTimeoutError/MaxRetryError.
Everything here follows the exception chain, so both families read the same way.
"""

from __future__ import annotations

import email.utils
import random
import socket
import time
from dataclasses import dataclass, field
from typing import Callable

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})  # busy or failing now; may answer later
GONE_STATUSES = frozenset({404, 410})
DESCRIBE_CHARS = 200


@dataclass(frozen=True)
class Backoff:
    """Retries of one SDK call: `attempts` tries in all, waits base_s * 2**i with jitter, capped;
    a Retry-After the service sent wins (capped too). `sleep` is injectable for tests."""

    attempts: int = 8
    base_s: float = 1.0
    cap_s: float = 60.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(self.cap_s, max(0.0, retry_after))
        return random.uniform(0.5, 1.0) * min(self.cap_s, self.base_s * 2 ** attempt)


def mask(text: str, secret: str) -> str:
    return text.replace(secret, "***") if secret else text


def _chain(err: BaseException) -> list[BaseException]:
    """err and what caused it (the SDK re-raises transport errors as DaytonaError from them; urllib3's
    MaxRetryError keeps the connection error as `.reason`)."""
    seen: list[BaseException] = []
    while err is not None and len(seen) < 8 and all(err is not s for s in seen):
        seen.append(err)
        reason = getattr(err, "reason", None)
        err = err.__cause__ or err.__context__ or (reason if isinstance(reason, BaseException) else None)
    return seen


def status_of(err: BaseException) -> int | None:
    """The HTTP status: DaytonaError.status_code, or the toolbox ApiException's status (0: no response)."""
    for e in _chain(err):
        for name in ("status_code", "status"):
            value = getattr(e, name, None)
            if type(value) is int and value > 0:
                return value
    return None


def retry_after_s(err: BaseException) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date), if the service sent one."""
    for e in _chain(err):
        headers = getattr(e, "headers", None)
        try:
            items = list(headers.items()) if headers else []
        except Exception:  # a headers object of another shape: no hint
            items = []
        for name, value in items:
            if str(name).lower() != "retry-after":
                continue
            text = str(value).strip()
            try:
                return max(0.0, float(text))
            except ValueError:
                pass
            try:
                return max(0.0, email.utils.parsedate_to_datetime(text).timestamp() - time.time())
            except (TypeError, ValueError, IndexError, OverflowError):
                return None
    return None


def _is_transport(err: BaseException) -> bool:
    """A connection error or timeout (no HTTP answer), wherever it sits in the chain."""
    import urllib3.exceptions
    names = {"DaytonaTimeoutError", "DaytonaConnectionError", "DaytonaConnectionTimeoutError"}
    for e in _chain(err):
        if isinstance(e, (urllib3.exceptions.HTTPError, TimeoutError, ConnectionError, socket.timeout)):
            return True
        if any(cls.__name__ in names for cls in type(e).__mro__):
            return True
    return False


def _is_unreachable(err: BaseException) -> bool:
    """Connection refused or a name that does not resolve: nothing listens there, and waiting will not
    change that within a run (85 s of backoff in every process used to precede each fallback)."""
    import urllib3.exceptions
    return any(isinstance(e, (ConnectionRefusedError, socket.gaierror, urllib3.exceptions.NameResolutionError))
               for e in _chain(err))


def may_have_reached(err: BaseException) -> bool:
    """Whether a failed request may have been acted on: not when the service answered 4xx or the
    connection was never made (refused, connect timeout), else yes (5xx, read timeout, dropped)."""
    import urllib3.exceptions
    status = status_of(err)
    if status is not None:
        return status >= 500
    return not any(isinstance(e, urllib3.exceptions.ConnectTimeoutError) for e in _chain(err))  # NewConnectionError too


def classify(err: BaseException) -> str:
    """"gone" (404/410: the sandbox no longer exists), "retry" (429/500/502/503/504, timeouts, a
    dropped connection), "unreachable" (connection refused, a name that does not resolve: not
    retried, the caller falls back or stops at once) or "fatal" (anything else: a refused key
    401/403, a bad request)."""
    status = status_of(err)
    if status in GONE_STATUSES:
        return "gone"
    if status in RETRY_STATUSES:
        return "retry"
    if status is None and _is_unreachable(err):
        return "unreachable"
    if status is None and _is_transport(err):
        return "retry"
    return "fatal"


def describe(err: BaseException, secret: str) -> str:
    """One masked line: type, status, the first line of the message (never headers or bodies)."""
    status = status_of(err)
    message = getattr(err, "message", None)
    if not isinstance(message, str):
        reason = getattr(err, "reason", None)  # the toolbox ApiException: its str() holds headers and body
        message = reason if isinstance(reason, str) and hasattr(err, "status") else str(err)
    lines = message.strip().splitlines()
    text = type(err).__name__ + (f" {status}" if status else "") + (f": {lines[0]}" if lines else "")
    return mask(text, secret)[:DESCRIBE_CHARS]
