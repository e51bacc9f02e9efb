// The typed API client (openapi-fetch over the committed OpenAPI document) and the sign-in
// token, kept in sessionStorage so a reload keeps the user signed in for this tab only.
import createClient, { type Middleware } from "openapi-fetch";
import type { paths } from "./schema";

const TOKEN = "railflow.token";

const listeners = new Set<() => void>();
export const getToken = () => sessionStorage.getItem(TOKEN);
export function setToken(t: string | null) {
  if (t) sessionStorage.setItem(TOKEN, t);
  else sessionStorage.removeItem(TOKEN);
  listeners.forEach((f) => f());
}
/** For useSyncExternalStore: re-render when the user signs in or out. */
export function onToken(f: () => void) {
  listeners.add(f);
  return () => { listeners.delete(f); };
}

const auth: Middleware = {
  onRequest({ request }) {
    const t = getToken();
    if (t) request.headers.set("Authorization", `Bearer ${t}`);
    return request;
  },
};

export const api = createClient<paths>({ baseUrl: window.location.origin });
api.use(auth);

/** The message of an API error body: FastAPI's ``detail`` as text. */
export function errorText(error: unknown): string {
  if (!error) return "";
  const d = (error as { detail?: unknown }).detail;
  if (typeof d === "string") return d;
  if (Array.isArray(d)) return d.map((x) => `${(x.loc ?? []).slice(1).join(".")}: ${x.msg}`).join("; ");
  return JSON.stringify(error);
}

/** Unwrap an openapi-fetch result, throwing the API's message on an error status. */
export async function must<T>(p: Promise<{ data?: T; error?: unknown; response: Response }>): Promise<T> {
  const { data, error, response } = await p;
  if (!response.ok) throw new ApiError(response.status, errorText(error) || response.statusText, error);
  return data as T;
}

export class ApiError extends Error {
  constructor(public status: number, message: string, public body?: unknown) {
    super(message);
  }
}
