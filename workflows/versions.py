"""Versions: drafts are edited, publishing makes an immutable numbered version, rollback
publishes an older version's content again as the newest, and runs keep their version.

:class:`WorkflowStore` is pure logic with no I/O and no clock: the runner applies the same
operations from its replicated log on every node (so numbering is deterministic) and persists
state with :meth:`WorkflowStore.snapshot` / :meth:`WorkflowStore.restore`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from workflows.compiled import CompiledWorkflow, compile_version
from workflows.diff import WorkflowDiff, diff
from workflows.errors import UnknownVersion
from workflows.model import Workflow

versions_per_workflow_max = 10_000
workflows_max = 10_000


@dataclass(frozen=True, slots=True)
class PublishedVersion:
    workflow_id: str
    version: int
    compiled: CompiledWorkflow
    rollback_of: int | None = None  # the older version republished, for a rollback

    @property
    def workflow(self) -> Workflow:
        """A fresh copy of the content, rebuilt from the canonical JSON."""
        return self.compiled.workflow_copy()


class WorkflowStore:
    """Drafts and published versions of many workflows, keyed by workflow id."""

    def __init__(self, *, known_metrics: Iterable[str] | None = None):
        self.known_metrics = None if known_metrics is None else frozenset(known_metrics)
        self._drafts: dict[str, Workflow] = {}
        self._versions: dict[str, list[PublishedVersion]] = {}

    def save_draft(self, workflow: Workflow) -> None:
        """Create or replace the draft of ``workflow.id`` (drafts need not be valid)."""
        if workflow.id not in self._drafts and len(self._drafts) >= workflows_max:
            raise ValueError(f"too many workflows (max {workflows_max})")
        self._drafts[workflow.id] = workflow

    def draft(self, workflow_id: str) -> Workflow | None:
        return self._drafts.get(workflow_id)

    def publish(self, workflow_id: str) -> PublishedVersion:
        """Validate and publish the current draft as the next version number.

        Raises WorkflowInvalid listing every problem, or UnknownVersion without a draft."""
        draft = self._drafts.get(workflow_id)
        if draft is None:
            raise UnknownVersion(f"workflow {workflow_id!r} has no draft")
        return self._append(draft, rollback_of=None)

    def rollback(self, workflow_id: str, to_version: int) -> PublishedVersion:
        """Publish the content of ``to_version`` again as the newest version."""
        old = self.version(workflow_id, to_version)
        return self._append(old.workflow, rollback_of=old.version)

    def version(self, workflow_id: str, version: int) -> PublishedVersion:
        history = self._versions.get(workflow_id, [])
        if not 1 <= version <= len(history):
            raise UnknownVersion(f"workflow {workflow_id!r} has no version {version}")
        return history[version - 1]

    def latest(self, workflow_id: str) -> PublishedVersion:
        history = self._versions.get(workflow_id)
        if not history:
            raise UnknownVersion(f"workflow {workflow_id!r} was never published")
        return history[-1]

    def versions(self, workflow_id: str) -> list[int]:
        return [v.version for v in self._versions.get(workflow_id, [])]

    def workflow_ids(self) -> list[str]:
        return sorted(set(self._drafts) | set(self._versions))

    def live_for_event(self, event_type: str) -> list[PublishedVersion]:
        """The newest version of every workflow bound to ``event_type``, by workflow id."""
        return [h[-1] for wid, h in sorted(self._versions.items())
                if h and h[-1].compiled.event_type == event_type]

    def diff(self, workflow_id: str, a: int, b: int) -> WorkflowDiff:
        return diff(self.version(workflow_id, a).workflow, self.version(workflow_id, b).workflow)

    def diff_draft(self, workflow_id: str) -> WorkflowDiff:
        """What the draft changes against the newest version (everything, if none)."""
        draft = self._drafts.get(workflow_id)
        if draft is None:
            raise UnknownVersion(f"workflow {workflow_id!r} has no draft")
        history = self._versions.get(workflow_id)
        if not history:
            return diff(draft.model_copy(update={"nodes": []}), draft)
        return diff(history[-1].workflow, draft)

    def snapshot(self) -> dict[str, Any]:
        """Plain JSON-able state; versions keep their numbers and rollback origins."""
        return {
            "drafts": {k: v.model_dump(mode="json") for k, v in sorted(self._drafts.items())},
            "versions": {
                k: [{"version": p.version, "rollback_of": p.rollback_of,
                     "workflow": p.workflow.model_dump(mode="json")} for p in h]
                for k, h in sorted(self._versions.items())
            },
        }

    @classmethod
    def restore(cls, state: dict[str, Any], *,
                known_metrics: Iterable[str] | None = None) -> WorkflowStore:
        store = cls(known_metrics=known_metrics)
        for k, v in state.get("drafts", {}).items():
            store._drafts[k] = Workflow.model_validate(v)
        for k, history in state.get("versions", {}).items():
            for item in history:
                # Versions were valid when published; recompile without today's metric list so
                # a removed metric cannot make history unreadable.
                wf = Workflow.model_validate(item["workflow"])
                compiled = compile_version(wf, item["version"])
                store._versions.setdefault(k, []).append(
                    PublishedVersion(k, item["version"], compiled, item["rollback_of"]))
        return store

    def _append(self, workflow: Workflow, rollback_of: int | None) -> PublishedVersion:
        history = self._versions.setdefault(workflow.id, [])
        if len(history) >= versions_per_workflow_max:
            raise ValueError(f"too many versions of {workflow.id!r} "
                             f"(max {versions_per_workflow_max})")
        number = len(history) + 1
        compiled = compile_version(workflow, number, known_metrics=self.known_metrics)
        published = PublishedVersion(workflow.id, number, compiled, rollback_of)
        history.append(published)
        return published
