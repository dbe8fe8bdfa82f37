/**
 * Confirmation before an action that disrupts someone: a modal <dialog> (the browser's own focus
 * trap and Escape) that says what happens and to whom, and refuses up front what the API would
 * refuse after (`refusal`: the dialog explains and offers no confirm button).
 */
import { useCallback, useEffect, useRef, useState, type ReactNode } from "react";

export interface Question {
  title: string;
  /** What happens, naming the people it affects. */
  body: ReactNode;
  /** The confirm button's words ("Power off np-01"). */
  confirm: string;
  /** Why it cannot be done now: shown instead of the confirm button. */
  refusal?: ReactNode;
}

/** `[dialog, ask]`: render `dialog` once; `await ask(question)` is true when confirmed. */
export function useConfirm(): [ReactNode, (question: Question) => Promise<boolean>] {
  const [question, setQuestion] = useState<Question | null>(null);
  const resolver = useRef<((answer: boolean) => void) | null>(null);
  const dialog = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    if (question && dialog.current && !dialog.current.open) dialog.current.showModal();
  }, [question]);
  const answer = (value: boolean) => {
    resolver.current?.(value);
    resolver.current = null;
    dialog.current?.close();
    setQuestion(null);
  };
  const ask = useCallback(
    (next: Question) =>
      new Promise<boolean>((resolve) => {
        resolver.current?.(false);
        resolver.current = resolve;
        setQuestion(next);
      }),
    [],
  );
  const element = question ? (
    <dialog ref={dialog} aria-labelledby="confirm-title" onCancel={() => answer(false)}>
      <article>
        <h2 id="confirm-title">{question.title}</h2>
        <div>{question.body}</div>
        {question.refusal ? (
          <p className="problem" role="alert">
            {question.refusal}
          </p>
        ) : null}
        <footer>
          <button type="button" className="secondary" onClick={() => answer(false)}>
            {question.refusal ? "Close" : "Cancel"}
          </button>
          {question.refusal ? null : (
            <button type="button" onClick={() => answer(true)}>
              {question.confirm}
            </button>
          )}
        </footer>
      </article>
    </dialog>
  ) : null;
  return [element, ask];
}

/** Rows chosen in a table for an action on all of them. */
export function useSelection() {
  const [chosen, setChosen] = useState<Set<string>>(new Set());
  const toggle = useCallback((id: string, on: boolean) => {
    setChosen((current) => {
      const next = new Set(current);
      if (on) next.add(id);
      else next.delete(id);
      return next;
    });
  }, []);
  const clear = useCallback(() => setChosen(new Set()), []);
  return { chosen, toggle, clear, setAll: (ids: string[]) => setChosen(new Set(ids)) };
}
