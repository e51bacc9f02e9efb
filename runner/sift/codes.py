"""Sift's API status codes and the error every Sift route answers with.

Sift's clients read ``status`` and ``error_message`` from the JSON body of any reply and raise
on a non-2xx HTTP status, so an error is never an HTTP 200 and its body is always JSON.
"""

from __future__ import annotations

OK = 0
UNEXPECTED = -1  # unexpected server-side error (HTTP 500)
UNAVAILABLE = -3  # the log could not take or apply the entry in time; try again (HTTP 503/504)
BAD_API_KEY = 51
BAD_FIELD_NAME = 52  # a custom field name outside [A-Za-z0-9_]
BAD_VALUE = 53  # a field's value has the wrong type or form
MISSING_FIELD = 55
BAD_JSON = 56
BAD_BODY = 57  # e.g. larger than the node accepts
RATE_LIMITED = 60
NOT_RESERVED = 105  # a "$" field Sift does not define

MESSAGES = {
    OK: "OK",
    UNEXPECTED: "Unexpected server-side error",
    UNAVAILABLE: "Service temporarily unavailable; try again",
    BAD_API_KEY: "Invalid API key",
    BAD_FIELD_NAME: "Invalid characters in field name",
    BAD_VALUE: "Invalid field value",
    MISSING_FIELD: "Missing required field",
    BAD_JSON: "Invalid JSON in request",
    BAD_BODY: "Invalid HTTP body",
    RATE_LIMITED: "Rate limited; too many events have been received in a short period of time",
    NOT_RESERVED: "Not a valid reserved field",
}


class SiftError(Exception):
    """A Sift-shaped failure: HTTP ``http_status``, Sift ``status``, a message naming the field."""

    def __init__(self, status: int, detail: str = "", http_status: int = 400,
                 headers: dict[str, str] | None = None, title: str | None = None) -> None:
        super().__init__(detail or MESSAGES.get(status, "error"))
        self.status = status
        self.detail = detail
        self.http_status = http_status
        self.headers = headers or {}
        self.title = title or MESSAGES.get(status, "error")

    def body(self) -> dict:
        message = self.title
        if self.detail:
            message = f"{message}: {self.detail}"
        # v205 readers look at status/error_message; v3 readers at error/description.
        return {"status": self.status, "error_message": message,
                "error": _V3_ERRORS.get(self.http_status, "invalid_request"),
                "description": message}


_V3_ERRORS = {401: "unauthorized", 404: "not_found", 429: "rate_limited",
              500: "internal_error", 503: "unavailable", 504: "timeout"}
