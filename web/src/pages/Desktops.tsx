/** Every desktop, filterable by state, with its actions. */
import { useState } from "react";
import type { Schemas } from "../api/client";
import { DesktopTable } from "../components/DesktopTable";
import { SelectField } from "../components/Field";

type State = Schemas["Desktop"]["state"];
const STATES: State[] = [
  "provisioning",
  "starting",
  "waiting_for_agent",
  "waiting_for_windows",
  "ready",
  "in_use",
  "powered_off",
  "refreshing",
  "deleting",
  "failed",
];

export function DesktopsPage() {
  const [state, setState] = useState<State | "">("");
  return (
    <section>
      <h1>Desktops</h1>
      <div className="filters">
        <SelectField label="State" value={state} onChange={(event) => setState(event.target.value as State | "")}>
          <option value="">Any state</option>
          {STATES.map((value) => (
            <option key={value} value={value}>
              {value.replace(/_/g, " ")}
            </option>
          ))}
        </SelectField>
      </div>
      <DesktopTable state={state || undefined} />
    </section>
  );
}
