// api calls the adapter's own /api/v1 with paths relative to the page, so
// the UI also works behind a reverse proxy's path prefix.
export interface Result<T> {
  data: T;
  warnings: string[];
  infos: string[];
}

interface Envelope<T> {
  status: 'success' | 'error';
  data?: T;
  errorType?: string;
  error?: string;
  warnings?: string[];
  infos?: string[];
}

export async function api<T>(path: string, params?: URLSearchParams, method: 'GET' | 'POST' = 'GET'): Promise<Result<T>> {
  let url = 'api/v1/' + path;
  const init: RequestInit = { method, credentials: 'same-origin' };
  if (params && method === 'POST') {
    init.body = params;
    init.headers = { 'Content-Type': 'application/x-www-form-urlencoded' };
  } else if (params) {
    url += '?' + params.toString();
  }
  const res = await fetch(url, init);
  let body: Envelope<T>;
  try {
    body = await res.json();
  } catch {
    throw new Error(`${res.status} ${res.statusText}`);
  }
  if (body.status !== 'success') {
    throw new Error(body.error ? `${body.errorType ?? 'error'}: ${body.error}` : `${res.status} ${res.statusText}`);
  }
  return { data: body.data as T, warnings: body.warnings ?? [], infos: body.infos ?? [] };
}
