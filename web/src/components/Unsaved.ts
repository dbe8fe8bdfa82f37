/**
 * Unsaved-changes warnings: while a form holds changes not saved, leaving it asks first, by
 * every way out (the app's own links, the browser's Back, a reload, closing the tab).
 *
 * The console's router is the library-mode BrowserRouter (no navigation blocker), so: a click on
 * a link of the page is caught before the router sees it; Back is met by an extra history entry
 * of the same address, pushed when the form turns dirty, so the first Back stays on the page and
 * asks, and leaves (one entry more back) only when confirmed; a reload or a closing tab gets the
 * browser's own question (beforeunload).
 */
import { useEffect, useState } from "react";

export const LEAVE_QUESTION = "You have changes that are not saved. Leave this page and lose them?";

export function useUnsavedWarning(dirty: boolean, question: string = LEAVE_QUESTION): void {
  useEffect(() => {
    if (!dirty) return;
    const onBeforeUnload = (event: BeforeUnloadEvent) => {
      event.preventDefault();
      event.returnValue = "";
    };
    const onClick = (event: MouseEvent) => {
      if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey) return;
      const link = (event.target as Element | null)?.closest?.("a[href]");
      if (!(link instanceof HTMLAnchorElement) || link.target === "_blank") return;
      const to = new URL(link.href, window.location.href);
      if (to.origin !== window.location.origin || to.href === window.location.href || to.hash) return;
      if (!window.confirm(question)) {
        event.preventDefault();
        event.stopPropagation();
      }
    };
    const here = window.location.href;
    window.history.pushState(window.history.state, "", here);
    let leaving = false;
    const onPopState = () => {
      if (leaving) return;
      if (window.confirm(question)) {
        leaving = true;
        // Answered already: the browser must not ask again when Back leaves the document.
        window.removeEventListener("beforeunload", onBeforeUnload);
        window.history.back();
      } else {
        window.history.pushState(window.history.state, "", here);
      }
    };
    window.addEventListener("beforeunload", onBeforeUnload);
    document.addEventListener("click", onClick, true);
    window.addEventListener("popstate", onPopState);
    return () => {
      window.removeEventListener("beforeunload", onBeforeUnload);
      document.removeEventListener("click", onClick, true);
      window.removeEventListener("popstate", onPopState);
    };
  }, [dirty, question]);
}

/** Whether `value` (a form's draft, anything JSON) differs from what it was when the form opened. */
export function useChanged(value: unknown): boolean {
  const [initial] = useState(() => JSON.stringify(value));
  return JSON.stringify(value) !== initial;
}

/** Warn before leaving while `value` differs from what it was when the form opened. */
export function useUnsavedDraft(value: unknown, saved = false): void {
  const changed = useChanged(value);
  useUnsavedWarning(changed && !saved);
}
