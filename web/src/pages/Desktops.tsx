/** Every desktop, searchable by user and filterable by pool and state, with its actions. */
import { useCallback, useState } from "react";
import type { Schemas } from "../api/client";
import { DesktopTable } from "../components/DesktopTable";
import { SelectField } from "../components/Field";
import { PoolFilter, UserFilter } from "../components/Filters";

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
  const [poolId, setPoolId] = useState("");
  const [userId, setUserId] = useState<string | undefined>(undefined);
  const onUser = useCallback((id: string | undefined) => setUserId(id), []);
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
        <UserFilter onChange={onUser} />
        <PoolFilter value={poolId} onChange={setPoolId} />
      </div>
      <DesktopTable state={state || undefined} poolId={poolId || undefined} userId={userId} />
    </section>
  );
}
