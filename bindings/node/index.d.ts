/// <reference lib="esnext.disposable" />
// Types of @pressure-rs/broker: the pressure ResourceBroker (Rust) in Node.js.

/** Limits, in the gateway config's camelCase JSON names. Any subset; an
 * acquisition must fit all of them, atomically. Unknown keys are a ConfigError. */
export interface Limits {
  requestsPerSecond?: number;
  requestsPerMinute?: number;
  tokensPerMinute?: number;
  inputTokensPerMinute?: number;
  outputTokensPerMinute?: number;
  maxConcurrentRequests?: number;
  /** `window` (default): strict sliding window, never more than N in any
   * interval of the window's length. `gcra`: continuous refill with `burst`. */
  algorithm?: 'window' | 'gcra';
  burst?: number;
  /** Lease TTL of a concurrency permit (renewed while held), default 30000. */
  leaseTtlMs?: number;
  /** Quota leasing of a hot key on Redis (ignored in memory): batches of
   * up to maxShare (0, 1] of N held by the fleet, each lease ttlMs long. */
  leasing?: { maxShare: number; ttlMs: number };
  /** Shadow mode: the broker decides and counts as usual; the caller that
   * admits a denial anyway counts it as `shadowDenied` (the gateway does). */
  shadow?: boolean;
}

/** Queue settings of a queue+execute resource (the core's QueueConfig). */
export interface QueueConfig {
  /** Most requests waiting at once (default 1024). */
  maxQueued?: number;
  /** Longest a request waits for capacity (default 30000). */
  maxWaitMs?: number;
  /** Interactive grants in a row after which a waiting batch request goes (default 8). */
  interactiveBurst?: number;
  /** Share of every limit kept free of batch traffic, 0 ≤ h < 1 (default 0). */
  batchHeadroom?: number;
  /** Transparent retries after a RateLimitedError (default 3). */
  maxRateLimitRetries?: number;
}

export interface ResourceConfig {
  limits: Limits;
  queue?: QueueConfig;
}

export type Priority = 'interactive' | 'batch';

/** Tokens: a number (input tokens) or input and output (output: the estimate, e.g. max_tokens). */
export type Tokens = number | { input?: number; output?: number };

export interface AcquireOptions {
  /** Requests (default 1). */
  requests?: number;
  tokens?: Tokens;
  inputTokens?: number;
  outputTokens?: number;
  /** Money reserved, in micro-USD (`costMicroUsdPerDay` / `costMicroUsdPerMonth` budgets; default 0). */
  costMicroUsd?: number;
  priority?: Priority;
}

/** Redis settings (the Rust RedisConfig, camelCase). */
export interface RedisConfig {
  url?: string;
  /** Seed nodes of a Redis Cluster; non-empty selects cluster mode. */
  clusterNodes?: string[];
  keyPrefix?: string;
  timeoutMs?: number;
  connectTimeoutMs?: number;
  failureMode?: 'closed' | 'open' | 'local';
  localShare?: number;
  connections?: number;
  denyCache?: boolean;
}

export interface BrokerOptions {
  /** A URL (`redis://host:port`), comma-separated cluster node URLs, or a RedisConfig. Absent: memory. */
  redis?: string | RedisConfig;
}

export interface ActualUsage {
  requests?: number;
  inputTokens?: number;
  outputTokens?: number;
  /** Money actually spent, in micro-USD (reconcile: default 0; reportUsage: absent keeps the reservation). */
  costMicroUsd?: number;
}

/** The answer of tryAcquire. */
export interface Acquisition extends AsyncDisposable {
  readonly allowed: boolean;
  /** 0 when granted; otherwise ms until the same demand could fit (→ Retry-After). */
  readonly waitTimeMs: number;
  /** On a denial: the dimension that needed the longest wait. */
  readonly dimension?: string;
  /** On a denial: the store could not be asked (503, not 429). */
  readonly unavailable?: boolean;
  /** Whether the permit still holds capacity. */
  readonly held: boolean;
  /** Gives the capacity back. Idempotent; a no-op after a denial. */
  release(): Promise<void>;
  /** Corrects the token and money reservation to the actual usage. */
  reconcile(actual: ActualUsage): Promise<void>;
}

export interface TaskContext {
  /** 1 for the first run, 2 for the first retry, … */
  attempt: number;
  /** Reports actual usage; the reservation is reconciled to it. */
  reportUsage(usage: ActualUsage): void;
}

export interface EnqueueRequest<T> {
  resource: string;
  tokens?: Tokens;
  priority?: Priority;
  /** Overrides the resource's queue.maxWaitMs for this request. */
  maxWaitMs?: number;
  /** The work; throw RateLimitedError on a downstream 429 to be retried. */
  execute: (ctx: TaskContext) => T | Promise<T>;
}

export interface EnqueueResult<T> {
  result: T;
  /** Time spent waiting for capacity, all attempts. */
  waitTimeMs: number;
  /** Runs of the task (1 + rate-limit retries). */
  attempts: number;
}

export interface WaitTimes {
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

export interface ResourceStats {
  resource: string;
  kind: 'queue' | 'limit';
  limits: Limits;
  /** Units counted now per dimension (fleet-wide on Redis). */
  usage: Record<string, number>;
  /** Live concurrency permits of this process; null without maxConcurrentRequests. */
  active: number | null;
  allowed: number;
  denied: number;
  backendErrors: number;
  /** Of `denied`, the refusals of a shadow limit admitted anyway. */
  shadowDenied: number;
  /** Queue resources only; null for limit resources (never 0). */
  queued: number | null;
  waitTimeMs: WaitTimes | null;
  lazy: boolean;
}

/** Limits checked once, for lazily registered (per-tenant) resources. */
export declare class LimitTemplate {
  constructor(limits: Limits);
  readonly limits: Limits;
}

export declare class ResourceBroker {
  /** Memory, or (with `redis`) Redis connected lazily: Redis down at start is not fatal. */
  constructor(options?: BrokerOptions);
  /** Connects first; rejects with BackendError when Redis does not answer. */
  static connect(options: BrokerOptions): Promise<ResourceBroker>;
  register(resource: string, config: ResourceConfig): this;
  registerLimit(resource: string, limits: Limits): this;
  /** Registers `resource` on first use with the template's limits; bounded (idle ones evicted). */
  lazyLimit(resource: string, template: LimitTemplate): Promise<void>;
  unregister(resource: string): boolean;
  tryAcquire(resource: string, opts?: AcquireOptions): Promise<Acquisition>;
  enqueue<T>(request: EnqueueRequest<T>): Promise<EnqueueResult<T>>;
  getStats(): Promise<ResourceStats[]>;
  readonly memory: boolean;
}

export declare class PressureError extends Error {
  readonly code: string;
  readonly resource?: string;
}
export declare class ConfigError extends PressureError {
  readonly code: 'ERR_PRESSURE_CONFIG';
  /** JSON path of the offending key, when known. */
  readonly field?: string;
}
export declare class UnknownResourceError extends PressureError {
  readonly code: 'ERR_PRESSURE_UNKNOWN_RESOURCE';
}
export declare class DemandTooLargeError extends PressureError {
  readonly code: 'ERR_PRESSURE_DEMAND_TOO_LARGE';
  readonly dimension: string;
  readonly demand: number;
  readonly max: number;
}
export declare class QueueFullError extends PressureError {
  readonly code: 'ERR_PRESSURE_QUEUE_FULL';
  readonly maxQueued: number;
}
export declare class QueueTimeoutError extends PressureError {
  readonly code: 'ERR_PRESSURE_QUEUE_TIMEOUT';
}
export declare class RateLimitedError extends PressureError {
  constructor(retryAfterMs?: number | null, message?: string);
  readonly code: 'ERR_PRESSURE_RATE_LIMITED';
  readonly retryAfterMs: number | null;
  /** Set when enqueue gave up. */
  readonly attempts?: number;
}
export declare class BackendError extends PressureError {
  readonly code: 'ERR_PRESSURE_BACKEND';
}
