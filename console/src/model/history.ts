// Undo/redo over immutable values. Edits sharing a ``group`` (typing in one criterion) merge
// into one undo step.
export interface History<T> { past: T[]; present: T; future: T[]; group: string | null }

export const historyLimit = 200;

export function start<T>(value: T): History<T> {
  return { past: [], present: value, future: [], group: null };
}

export function push<T>(h: History<T>, next: T, group: string | null = null): History<T> {
  if (next === h.present) return h;
  if (group !== null && group === h.group) return { ...h, present: next, future: [] };
  return { past: [...h.past, h.present].slice(-historyLimit), present: next, future: [], group };
}

export function undo<T>(h: History<T>): History<T> {
  if (!h.past.length) return h;
  return { past: h.past.slice(0, -1), present: h.past[h.past.length - 1], future: [h.present, ...h.future], group: null };
}

export function redo<T>(h: History<T>): History<T> {
  if (!h.future.length) return h;
  return { past: [...h.past, h.present], present: h.future[0], future: h.future.slice(1), group: null };
}

export const canUndo = <T>(h: History<T>) => h.past.length > 0;
export const canRedo = <T>(h: History<T>) => h.future.length > 0;
