/** The console's entry: boot (config, sign-in), then the routed application. */
import "@picocss/pico/css/pico.min.css";
import "./styles.css";
import { QueryClient, QueryClientProvider } from "@tanstack/react-query";
import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import { BrowserRouter } from "react-router";
import { App } from "./App";
import { ApiError } from "./api/problem";
import { Boot } from "./Boot";
import { SessionContext } from "./session";

const queries = new QueryClient({
  defaultOptions: {
    queries: {
      staleTime: 10_000,
      refetchOnWindowFocus: false,
      // A problem the API answered (403, 404, 422...) will not change on retry; a network error may.
      retry: (count, error) => !(error instanceof ApiError) && count < 2,
    },
  },
});

createRoot(document.getElementById("root")!).render(
  <StrictMode>
    <Boot>
      {(session) => (
        <SessionContext.Provider value={session}>
          <QueryClientProvider client={queries}>
            <BrowserRouter>
              <App />
            </BrowserRouter>
          </QueryClientProvider>
        </SessionContext.Provider>
      )}
    </Boot>
  </StrictMode>,
);
