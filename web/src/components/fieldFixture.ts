/** Test data: a declared connection field with every member, as `GET /api/v1/drivers` lists it. */
import type { ConnectionField } from "./DriverFields";

export function field(name: string, change: Partial<ConnectionField> = {}): ConnectionField {
  return {
    name,
    label: name,
    kind: "text",
    required: false,
    default: null,
    help: "",
    secret: false,
    choices: [],
    minimum: null,
    maximum: null,
    placeholder: "",
    sealed: false,
    sealed_keys: [],
    ...change,
  };
}
