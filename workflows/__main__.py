"""``python -m workflows schema [--check]``: write (or check) workflows/schema/workflow.schema.json.

``python -m workflows validate FILE``: print every problem of a workflow JSON file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from workflows.model import Workflow, workflow_json_schema

SCHEMA_PATH = Path(__file__).parent / "schema" / "workflow.schema.json"


def schema_text() -> str:
    return json.dumps(workflow_json_schema(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    if argv[:1] == ["schema"]:
        text = schema_text()
        if "--check" in argv[1:]:
            current = SCHEMA_PATH.read_text() if SCHEMA_PATH.exists() else ""
            if current != text:
                print(f"{SCHEMA_PATH} is out of date: run python -m workflows schema")
                return 1
            print(f"{SCHEMA_PATH} is up to date")
            return 0
        SCHEMA_PATH.parent.mkdir(parents=True, exist_ok=True)
        SCHEMA_PATH.write_text(text)
        print(f"wrote {SCHEMA_PATH}")
        return 0
    if argv[:1] == ["validate"] and len(argv) == 2:
        from workflows.validate import validate

        workflow = Workflow.model_validate_json(Path(argv[1]).read_text())
        problems = validate(workflow)
        for p in problems:
            print(p)
        print("valid" if not problems else f"{len(problems)} problems")
        return 0 if not problems else 1
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
