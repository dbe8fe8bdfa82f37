"""Problem responses that operations document, by what they can fail with."""

from __future__ import annotations

from deskpool.api.problems import ProblemSchema
from deskpool.api.routes import ResponseSpec

PROTECTED_PROBLEMS: dict[int, ResponseSpec] = {
    401: ResponseSpec("No valid bearer token.", ProblemSchema),
    403: ResponseSpec("The caller lacks the operation's permission.", ProblemSchema),
    429: ResponseSpec("Rate limit exceeded; see Retry-After.", ProblemSchema),
    503: ResponseSpec("Authentication is not configured, or a dependency is down.", ProblemSchema),
}
