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
from workflows.direct import compile_direct
from workflows.errors import InvariantViolation, is_engine_error
from workflows.model import criteria_chars_max

error_chars_max = 300


class CriterionError(ValueError):
    """A criterion that cannot be published; ``code`` says which kind of problem it is."""

    def __init__(self, code: str, message: str, span: tuple[int, int] | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.span = span  # [start, end) characters of the criterion, when known


@dataclass(frozen=True, eq=False)
class CompiledCriterion:
    source: str
    program: cel.Program
    paths: frozenset[Path]  # record fields the criterion reads
    constant: bool | None  # the value when it reads no variable, else None
    # Flat variable name -> record path, when the program reads fields as flat variables
    # (``event.country`` compiled as one variable): converting scalars into CEL is several
    # times cheaper than converting nested maps. Empty when it reads the records themselves.
    flat: tuple[tuple[str, Path], ...] = ()
    # The criterion as a Python function of the flat variables (``workflows.direct``), or
    # None when it uses a construct outside that subset: then CEL alone evaluates it.
    direct: Any = None

    def evaluate(self, activation: Any) -> tuple[bool, str | None]:
        """(value, error): value is False whenever error is set. Never raises."""
        try:
            value = self.program.execute(activation)
        except BaseException as e:  # any runtime failure counts as false, by design
            if not is_engine_error(e):
                raise
            return False, self._readable(_error_text(e))
        if value is True:
            return True, None
        if value is False:
            return False, None
        return False, _error_text(TypeError(f"criterion gave {type(value).__name__}, not bool"))

    def evaluate_on(self, context: Any) -> tuple[bool, str | None]:
        """Evaluate against a step context (or its dict form): builds the activation first.
        For one-off use; a step builds one activation for all the edges of a node."""
        from workflows.activation import StepContext, activation, read_plan

        variables, failure = activation(read_plan([self]), StepContext.of(context))
        if failure is not None:
            return False, failure
        return self.evaluate(variables)

    def _readable(self, error: str) -> str:
        for name, path in self.flat:
            if name in error:
                error = error.replace(name, ".".join(path))
        return error


def flat_name(path: Path) -> str:
    """A CEL identifier for a record path, distinct for distinct paths (``_`` is escaped)."""
    return "_rf_" + "_1".join(part.replace("_", "_0") for part in path)


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
        raise CriterionError(e.code, e.message, e.span) from None
    try:
        program = cel.compile(source)
    except BaseException as e:  # the binding raises several types for syntax errors
        if not is_engine_error(e):
            raise
        raise CriterionError("criteria_syntax", f"syntax error: {_error_text(e)}") from None
    constant = None
    if not result.paths and not program.variables():
        value, error = CompiledCriterion(source, program, result.paths, None).evaluate({})
        constant = value if error is None else None
    flat: tuple[tuple[str, Path], ...] = ()
    if result.selections:
        pieces, last = [], 0
        for start, end, path in result.selections:
            pieces += [source[last:start], flat_name(path)]
            last = end
        rewritten = "".join(pieces) + source[last:]
        try:
            program = cel.compile(rewritten)
        except BaseException as e:
            if not is_engine_error(e):
                raise
            raise InvariantViolation(f"flat form {rewritten!r} of {source!r} fails: {e}") from e
        flat = tuple(sorted({(flat_name(p), p) for _, _, p in result.selections}))
    direct = None
    if flat and result.tree is not None:
        direct = compile_direct(result.tree, {p: name for name, p in flat})
    return CompiledCriterion(source, program, result.paths, constant, flat, direct)


def _error_text(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}"[:error_chars_max]
