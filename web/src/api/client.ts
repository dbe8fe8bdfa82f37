/** The API client: generated from api/openapi/openapi.yaml (schema.d.ts) with openapi-fetch. */
import createClient, { type Client, type Middleware } from "openapi-fetch";
import { ApiError, problemFrom } from "./problem";
import type { components, paths } from "./schema";

export type Schemas = components["schemas"];
export type Api = Client<paths>;

/** Attach the bearer token to every call. */
export function bearerMiddleware(getToken: () => Promise<string | null>): Middleware {
  return {
    async onRequest({ request }) {
      const token = await getToken();
      if (token) request.headers.set("Authorization", `Bearer ${token}`);
      return request;
    },
  };
}

export function createApi(
  baseUrl: string,
  getToken: () => Promise<string | null>,
  onProblem?: (error: ApiError) => void,
): Api {
  const client = createClient<paths>({ baseUrl });
  client.use(bearerMiddleware(getToken));
  if (onProblem) {
    client.use({
      async onResponse({ response }) {
        if (response.status === 401 || response.status === 503) {
          const body: unknown = await response
            .clone()
            .json()
            .catch(() => null);
          onProblem(new ApiError(problemFrom(response.status, body, response.statusText)));
        }
        return response;
      },
    });
  }
  return client;
}

interface Outcome<T> {
  data?: T;
  error?: unknown;
  response: Response;
}

/** The data of a successful call; an {@link ApiError} with the API's problem otherwise. */
export async function unwrap<T>(call: Promise<Outcome<T>>): Promise<T> {
  const { data, error, response } = await call;
  if (!response.ok || error !== undefined) {
    throw new ApiError(problemFrom(response.status, error, response.statusText));
  }
  return data as T;
}
