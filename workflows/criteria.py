"""CEL criteria: compile once at publish, evaluate many times per step.

A criterion is type-checked by :mod:`workflows.cel_check` and compiled by the Rust-backed
``common-expression-language`` library (see CEL.md for why). Evaluation never raises: a runtime
error (a missing field, a type mismatch in dynamic data) makes the criterion false and is
returned as a message for the step's trace. Variables are ``event``, ``scores``, ``metrics``
and ``apps``; scores and metrics are doubles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cel

from workflows.cel_check import CheckError, Path, check
from workflows.cel_types import AnyType
from workflows.model import criteria_chars_max

error_chars_max = 300


class CriterionError(ValueError):
    """A criterion that cannot be published; ``code`` says which kind of problem it is."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, eq=False)
class CompiledCriterion:
    source: str
    program: cel.Program
    paths: frozenset[Path]  # record fields the criterion reads
    constant: bool | None  # the value when it reads no variable, else None

    def evaluate(self, activation: Any) -> tuple[bool, str | None]:
        """(value, error): value is False whenever error is set. Never raises."""
        try:
            value = self.program.execute(activation)
        except Exception as e:  # noqa: BLE001 - any runtime failure counts as false, by design
            return False, _error_text(e)
        if value is True:
            return True, None
        if value is False:
            return False, None
        return False, _error_text(TypeError(f"criterion gave {type(value).__name__}, not bool"))


def compile_criterion(source: str, roots: dict[str, AnyType]) -> CompiledCriterion:
    """Check and compile one criterion; raise CriterionError with a clear message otherwise."""
    if not isinstance(source, str):
        raise CriterionError("criteria_syntax", "a criterion must be a string")
    if len(source) > criteria_chars_max:
        raise CriterionError(
            "criteria_limit", f"criterion too long ({len(source)} > {criteria_chars_max} chars)"
        )
    if not source.strip():
        raise CriterionError("criteria_syntax", "a criterion is empty")
    if "\x00" in source:
        raise CriterionError("criteria_syntax", "a criterion cannot contain a NUL character")
    try:
        result = check(source, roots)
    except CheckError as e:
        raise CriterionError(e.code, e.message) from None
    try:
        program = cel.compile(source)
    except Exception as e:  # noqa: BLE001 - the binding raises several types for syntax errors
        raise CriterionError("criteria_syntax", f"syntax error: {_error_text(e)}") from None
    constant = None
    if not result.paths and not program.variables():
        value, error = CompiledCriterion(source, program, result.paths, None).evaluate({})
        constant = value if error is None else None
    return CompiledCriterion(source, program, result.paths, constant)


def _error_text(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}"[:error_chars_max]
