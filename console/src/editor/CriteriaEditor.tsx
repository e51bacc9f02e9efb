// A CEL criterion in CodeMirror 6: completion from what the edge may read (its scope) and the
// server's problems as diagnostics at their character span.
import { autocompletion, closeBrackets, type CompletionContext, type CompletionResult } from "@codemirror/autocomplete";
import { defaultKeymap } from "@codemirror/commands";
import { forceLinting, linter, lintGutter, type Diagnostic } from "@codemirror/lint";
import { EditorState } from "@codemirror/state";
import { EditorView, keymap, placeholder } from "@codemirror/view";
import { useEffect, useRef } from "react";
import { completeAt } from "../model/completion";
import type { Problem } from "../model/types";
import type { Scope } from "../model/types";

export function CriteriaEditor(props: {
  value: string; onChange: (v: string) => void; scope: Scope; problems: Problem[];
  label: string; readOnly?: boolean; id?: string;
}) {
  const host = useRef<HTMLDivElement>(null);
  const view = useRef<EditorView | null>(null);
  const latest = useRef(props);
  latest.current = props;

  useEffect(() => {
    const source = (ctx: CompletionContext): CompletionResult | null => {
      const word = ctx.matchBefore(/[A-Za-z_][\w.]*|\.$/);
      if (!word && !ctx.explicit) return null;
      const text = word?.text ?? "";
      const path = text.split(".");
      const from = (word?.to ?? ctx.pos) - path[path.length - 1].length;
      return { from, options: completeAt(latest.current.scope, path), validFor: /^\w*$/ };
    };
    const lint = linter((v) => latest.current.problems.map((p): Diagnostic => {
      const len = v.state.doc.length;
      const [a, b] = p.span ?? [0, len];
      const from = Math.min(a, len);
      return { from, to: Math.max(from, Math.min(b, len)), severity: "error", message: `${p.code}: ${p.message}` };
    }), { delay: 0 });
    view.current = new EditorView({
      parent: host.current!,
      state: EditorState.create({
        doc: props.value,
        extensions: [
          keymap.of(defaultKeymap), closeBrackets(), autocompletion({ override: [source], activateOnTyping: true }),
          lint, lintGutter(), placeholder("e.g. event.amount > 50000"),
          EditorView.lineWrapping, EditorState.readOnly.of(!!props.readOnly),
          EditorView.editable.of(!props.readOnly),
          EditorView.contentAttributes.of({ "aria-label": props.label, ...(props.id ? { "data-testid": props.id } : {}) }),
          EditorView.updateListener.of((u) => { if (u.docChanged) latest.current.onChange(u.state.doc.toString()); }),
        ],
      }),
    });
    return () => view.current?.destroy();
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, []);

  // Outside changes (undo, redo, reload) replace the document.
  useEffect(() => {
    const v = view.current;
    if (v && v.state.doc.toString() !== props.value) {
      v.dispatch({ changes: { from: 0, to: v.state.doc.length, insert: props.value } });
    }
  }, [props.value]);

  // Re-lint when the server's problems change.
  useEffect(() => {
    const v = view.current;
    if (v) forceLinting(v);
  }, [props.problems]);

  return <div className="cm-host" ref={host} />;
}
