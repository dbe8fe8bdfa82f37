/** The console's entry: boot (config, sign-in), then the routed application. */
import "@picocss/pico/css/pico.min.css";
import "./styles.css";
import { QueryClientProvider } from "@tanstack/react-query";
import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import { BrowserRouter } from "react-router";
import { App } from "./App";
import { newQueryClient } from "./api/queries";
import { Boot } from "./Boot";
import { SessionContext } from "./session";

const queries = newQueryClient();

createRoot(document.getElementById("root")!).render(
  <StrictMode>
    <Boot queries={queries}>
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
