// The public API, as the console calls it: the same origin, the caller's API key as a
// bearer token, and every error turned into the API's own message.

const KEY = "console.apiKey";

export function storedKey(): string | null {
  return sessionStorage.getItem(KEY);
}

export function storeKey(key: string): void {
  sessionStorage.setItem(KEY, key);
}

export function forgetKey(): void {
  sessionStorage.removeItem(KEY);
}

/** An answer other than 2xx: its status and the API's `detail` or `error`. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** Called when the key is refused (401): the console returns to sign-in. */
let onRefused: (error: ApiError) => void = () => {};
export function whenRefused(handler: (error: ApiError) => void): void {
  onRefused = handler;
}

/** The message of an error body: `detail` or `error` as the API gives them. */
export function messageOf(status: number, body: unknown): string {
  if (body && typeof body === "object") {
    const record = body as Record<string, unknown>;
    // The API's two shapes, then API Gateway's own (throttled, timed out).
    for (const field of ["detail", "error", "message"]) {
      const value = record[field];
      if (typeof value === "string" && value.length > 0) return value;
    }
  }
  return `the service answered ${status}`;
}

export async function call<T>(method: string, path: string, body?: unknown, key = storedKey()): Promise<T> {
  const headers: Record<string, string> = {};
  if (key) headers.authorization = `Bearer ${key}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  let response: Response;
  try {
    response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (error) {
    throw new ApiError(0, `the service could not be reached (${String(error)})`);
  }
  const text = await response.text();
  let parsed: unknown = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = null;
  }
  if (!response.ok) {
    const error = new ApiError(response.status, messageOf(response.status, parsed));
    if (response.status === 401) onRefused(error);
    throw error;
  }
  return parsed as T;
}

export const get = <T>(path: string) => call<T>("GET", path);
export const post = <T>(path: string, body?: unknown) => call<T>("POST", path, body);

/** A query string of the given non-empty values. */
export function query(values: Record<string, string | number | null | undefined>): string {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(values)) {
    if (value !== null && value !== undefined && value !== "") params.set(name, String(value));
  }
  const text = params.toString();
  return text ? `?${text}` : "";
}

/** Sends a file to an upload ticket's URL, reporting progress (0..1). */
export function sendFile(
  ticket: { upload_url: string; upload_method: string; upload_headers: Record<string, string> },
  file: Blob,
  progress: (share: number) => void,
): Promise<void> {
  return new Promise((resolve, reject) => {
    const request = new XMLHttpRequest();
    request.open(ticket.upload_method, ticket.upload_url);
    for (const [name, value] of Object.entries(ticket.upload_headers)) request.setRequestHeader(name, value);
    request.upload.onprogress = (event) => {
      if (event.lengthComputable) progress(event.loaded / event.total);
    };
    request.onload = () => {
      if (request.status >= 200 && request.status < 300) {
        progress(1);
        resolve();
      } else {
        let body: unknown = null;
        try {
          body = JSON.parse(request.responseText);
        } catch {
          body = null;
        }
        reject(new ApiError(request.status, messageOf(request.status, body)));
      }
    };
    request.onerror = () => reject(new ApiError(0, "the upload could not reach its URL"));
    request.send(file);
  });
}
