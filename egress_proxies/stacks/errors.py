"""How a failed stack operation is retried: the error taxonomy shared by every provider.

    ErrorClass
    ├── TRANSIENT  retry with exponential backoff; the default, because an
    │              error nobody recognised is assumed to pass
    ├── QUOTA      set the quota condition and retry slowly: an allocation
    │              quota frees up only when a human raises it or resources go
    └── PERMANENT  latch the PermanentError condition for this generation:
                   the same spec cannot succeed, only a spec edit can

    StackOperationError    a failed operation, with the text `classify` reads
    (PermanentProgramError, raised by an inline program for a spec it cannot
    turn into resources, is in `programs/errors.py`: it is a pulumi.RunError,
    and the operator does not import pulumi)

`classify` reads the text of a failed pulumi operation (a CommandError's
stdout and stderr) as the Google and Kubernetes providers print it. The
rules are tried in order and the first match wins. When one run fails in
several ways, the class that retries sooner wins (transient before quota
before permanent): the retry then surfaces the remaining error alone.
Authentication failures (401, token exchange errors) stay transient:
credentials rotate, and a latched Failed phase would need a spec edit to clear.
`summarize_error` picks from the same text the one line a condition shows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from egress_proxies.errors import EgressProxiesError

PERMANENT_PROGRAM_ERROR_MARKER = "egress-proxies: invalid spec"


class ErrorClass(StrEnum):
    """What the reconciler does after a failed stack operation."""

    TRANSIENT = "Transient"
    PERMANENT = "Permanent"
    QUOTA = "Quota"


class StackOperationError(EgressProxiesError):
    """A pulumi operation failed; `text` is the tail of its output, for classification."""

    def __init__(self, operation: str, stack: str, text: str) -> None:
        super().__init__(f"pulumi {operation} of stack {stack} failed: {text[-1000:]}")
        self.operation = operation
        self.stack = stack
        self.text = text

    def __reduce__(self) -> tuple[type[StackOperationError], tuple[str, str, str]]:
        # Raised in the stack worker process, re-raised in the operator.
        return (type(self), (self.operation, self.stack, self.text))


@dataclass(frozen=True)
class _Rule:
    error_class: ErrorClass
    pattern: re.Pattern[str]


def _rule(error_class: ErrorClass, *alternatives: str) -> _Rule:
    return _Rule(error_class, re.compile("|".join(alternatives)))


_RULES = (
    _rule(ErrorClass.PERMANENT, re.escape(PERMANENT_PROGRAM_ERROR_MARKER)),
    # Per-second and per-minute API rate limits clear within a minute; the
    # Google provider already retries most of them before giving up.
    _rule(
        ErrorClass.TRANSIENT,
        r"\brateLimitExceeded\b",
        r"\buserRateLimitExceeded\b",
        r"\bRATE_LIMIT_EXCEEDED\b",
        r"Rate Limit Exceeded",
        r"limit '[^']*\bper (?:minute|100 seconds|second)\b",
    ),
    # A zone stockout is capacity, not quota: it passes without anyone acting,
    # and the backoff curve already slows down to minutes.
    _rule(ErrorClass.TRANSIENT, r"does not have enough resources available"),
    # The ServiceAccount admission plugin rejects pods in a namespace whose
    # default ServiceAccount the controller has not created yet.
    _rule(ErrorClass.TRANSIENT, r"error looking up service account"),
    _rule(
        ErrorClass.QUOTA,
        r"Quota '[^']+' exceeded",
        r"Quota limit '[^']+' has been exceeded",
        r"Quota exceeded for quota (?:metric|group)",
        r"\bquotaExceeded\b",
        r"\bQUOTA_EXCEEDED\b",
        r"Insufficient (?:regional |project )?quota",
        r"quotas were exceeded",
        # A Kubernetes ResourceQuota; it answers 403 "is forbidden" too, which
        # is why quota rules come before the permission rules below.
        r"is forbidden: exceeded quota:",
    ),
    _rule(
        ErrorClass.PERMANENT,
        # Google: permission denied or the API switched off in the project.
        r", forbidden\b",
        r"\bPERMISSION_DENIED\b",
        r"Required '[\w.]+' permission",
        r"\baccessNotConfigured\b",
        r"\bSERVICE_DISABLED\b",
        r"has not been used in project",
        # Google: an invalid argument, or a referenced image, network or
        # machine type that does not exist.
        r", (?:invalid|badRequest|invalidParameter|notFound)\b",
        r"\bINVALID_ARGUMENT\b",
        r"Invalid value for field",
        r"googleapi: Error 404\b",
        r"Could not find image or family",
        # Kubernetes: RBAC or admission denial (403), a manifest the API
        # server rejects (422), and pulumi's own input check failures.
        r"is forbidden:",
        r"\" is invalid: ",
        r"Unprocessable Entity",
        r"resource '[^']+' has a problem:",
        # A change Compute applies only to a stopped VM; programs replace instead.
        r"on a started instance requires stopping it",
    ),
)


def classify(error_text: str) -> ErrorClass:
    """The class of a failed pulumi operation, from the text it printed."""
    for rule in _RULES:
        if rule.pattern.search(error_text):
            return rule.error_class
    return ErrorClass.TRANSIENT


# Most telling first: a cause, then any error line; pulumi's output ends in summaries.
_TELLING = (
    re.compile(r"is forbidden|permission denied|access denied|exceeded|quota", re.IGNORECASE),
    re.compile(r"invalid|not found", re.IGNORECASE),
    re.compile(r"error:", re.IGNORECASE),
)


def summarize_error(text: str) -> str:
    """The line of a failed pulumi operation's text worth showing in a condition."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for pattern in _TELLING:
        telling = [line for line in lines if pattern.search(line)]
        if telling:
            return telling[-1][:500]
    return lines[-1][:500] if lines else "unknown error"
