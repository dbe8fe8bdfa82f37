/**
 * Confirmation before an action that disrupts someone: a modal <dialog> (the browser's own focus
 * trap and Escape) that says what happens and to whom, and refuses up front what the API would
 * refuse after (`refusal`: the dialog explains and offers no confirm button, only what would
 * make the action possible, `offer`). When the action disrupts users (`messageTo`), an optional
 * message to them: the action sends it to them before it is done.
 */
import { useCallback, useEffect, useId, useRef, useState, type ReactNode } from "react";

export interface Question {
  title: string;
  /** What happens, naming the people it affects. */
  body: ReactNode;
  /** The confirm button's words ("Power off np-01"). */
  confirm: string;
  /** Why it cannot be done now: shown instead of the confirm button. */
  refusal?: ReactNode;
  /** With a refusal: what makes the action possible, offered as a button ("Set it to draining"). */
  offer?: { label: string; run: () => void };
  /** Whom the action disrupts ("Desk User"): the dialog offers an optional message to them. */
  messageTo?: string;
}

/** A confirmed question: the message to the people it disrupts ("" for none). */
export interface Confirmed {
  message: string;
}

/** What `ask` resolves to: `false` when not confirmed. */
export type Answer = false | Confirmed;

/** `[dialog, ask]`: render `dialog` once; `await ask(question)` is truthy when confirmed. */
export function useConfirm(): [ReactNode, (question: Question) => Promise<Answer>] {
  const [question, setQuestion] = useState<Question | null>(null);
  const [message, setMessage] = useState("");
  const resolver = useRef<((answer: Answer) => void) | null>(null);
  const dialog = useRef<HTMLDialogElement>(null);
  const messageId = useId();
  useEffect(() => {
    if (question && dialog.current && !dialog.current.open) dialog.current.showModal();
  }, [question]);
  const answer = (value: Answer) => {
    resolver.current?.(value);
    resolver.current = null;
    dialog.current?.close();
    setQuestion(null);
  };
  const ask = useCallback(
    (next: Question) =>
      new Promise<Answer>((resolve) => {
        resolver.current?.(false);
        resolver.current = resolve;
        setMessage("");
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
        {question.messageTo && !question.refusal ? (
          <label htmlFor={messageId}>
            Message to {question.messageTo} (optional: shown in the desktop view before it happens)
            <textarea id={messageId} rows={3} maxLength={2000} value={message} onChange={(event) => setMessage(event.target.value)} />
          </label>
        ) : null}
        <footer>
          <button type="button" className="secondary" onClick={() => answer(false)}>
            {question.refusal ? "Close" : "Cancel"}
          </button>
          {question.refusal && question.offer ? (
            <button
              type="button"
              onClick={() => {
                question.offer?.run();
                answer(false);
              }}
            >
              {question.offer.label}
            </button>
          ) : null}
          {question.refusal ? null : (
            <button type="button" onClick={() => answer({ message: message.trim() })}>
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
