// A partner's integration, written against the client generated from the
// published openapi.json (openapi-typescript types + openapi-fetch), the way a
// partner would write it: no casts, no `any`, no non-null assertions. Every
// response is narrowed with `if (error)` and checks on its fields, so this file
// compiling under `tsc --strict` is part of what it proves.
//
// Environment (set by scripts/clients.sh):
//   ESIM_BASE_URL      http://127.0.0.1:PORT/partner/v1
//   ESIM_LIVE_KEY      svc_sk_live_... of a live, funded partner
//   ESIM_SANDBOX_KEY   svc_sk_test_... of the same partner
//   ESIM_SIM_URL       optional: the simulators listener, to pay the deposit
//   ESIM_FLOW_DEADLINE_MS  optional: how long to wait for provisioning and credit (default 60000)
import { randomUUID } from "node:crypto";
import createClient from "openapi-fetch";
import type { components, paths } from "./generated/schema.js";

type OrderView = components["schemas"]["OrderView"];
type OrderStatus = components["schemas"]["OrderStatus"];
type DepositView = components["schemas"]["DepositView"];
type Mode = components["schemas"]["Mode"];
type ErrorCode = components["schemas"]["ErrorCode"];

let step = "start";

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => {
    setTimeout(resolve, ms);
  });
}

function fail(message: string): never {
  console.error(`typescript flow FAILED at step "${step}": ${message}`);
  process.exit(1);
}

function check(condition: boolean, message: string): asserts condition {
  if (!condition) fail(message);
}

function env(name: string): string {
  const value = process.env[name];
  if (value === undefined || value === "") fail(`environment variable ${name} is not set`);
  return value;
}

function begin(name: string): void {
  step = name;
}

function ok(message: string): void {
  console.log(`  ok  ${step}: ${message}`);
}

/** The error body's fields a partner logs: code, message, request id. */
function describeError(error: components["schemas"]["Error"]): string {
  return `${error.error.code} (${error.error.message}; request ${error.error.request_id})`;
}

/** What a partner does with each order status; TypeScript checks the switch is exhaustive. */
function orderOutcome(status: OrderStatus): "wait" | "deliver" | "deliver_part" | "refunded" {
  switch (status) {
    case "processing":
      return "wait";
    case "completed":
      return "deliver";
    case "partially_completed":
      return "deliver_part";
    case "failed":
      return "refunded";
    default: {
      const unknownStatus: never = status;
      return unknownStatus;
    }
  }
}

/** How a partner shows a deposit: `method` is the discriminator (spec: branch on it). */
function depositChannel(deposit: DepositView): string {
  switch (deposit.method) {
    case "crypto":
      return `crypto invoice ${deposit.payment_url ?? "(no payment page)"}`;
    case "wire":
      return `wire ${deposit.reference ?? ""}`;
    default: {
      const unknownMethod: never = deposit.method;
      return unknownMethod;
    }
  }
}

/** The expected refusal, branching on the generated error-code union. */
function expectRefusal(code: ErrorCode, want: ErrorCode, httpStatus: number, wantStatus: number): void {
  switch (code) {
    case "plan.not_found":
    case "balance.insufficient":
    case "forbidden":
      check(code === want, `expected ${want}, got ${code}`);
      check(httpStatus === wantStatus, `expected HTTP ${wantStatus} for ${code}, got ${httpStatus}`);
      return;
    case "rate_limit.exceeded":
    case "supplier_error":
    case "service_unavailable":
    case "internal_error":
      fail(`transient refusal ${code} (HTTP ${httpStatus}) where ${want} was expected`);
      break;
    default:
      fail(`unexpected error code ${code} (HTTP ${httpStatus}) where ${want} was expected`);
  }
}

const baseUrl = env("ESIM_BASE_URL");
const liveKey = env("ESIM_LIVE_KEY");
const sandboxKey = env("ESIM_SANDBOX_KEY");
const simUrl = process.env["ESIM_SIM_URL"] ?? "";
const deadlineMs = Number(process.env["ESIM_FLOW_DEADLINE_MS"] ?? "60000");

const live = createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${liveKey}` } });
const sandbox = createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${sandboxKey}` } });
const anonymous = createClient<paths>({ baseUrl });

// --- health -----------------------------------------------------------------
begin("health");
{
  const { data, error } = await anonymous.GET("/health");
  if (error) fail(`GET /health: ${"error" in error ? describeError(error) : `${error.status}, database ${error.database}`}`);
  check(data.status === "ok" && data.database === "ok", `health is ${data.status}, database ${data.database}`);
  ok(`status ${data.status}, database ${data.database}, up ${data.uptime_seconds}s`);
}

// --- who am I, and what do I hold -------------------------------------------
begin("me");
{
  const { data: me, error } = await live.GET("/me");
  if (error) fail(`GET /me: ${describeError(error)}`);
  check(me.object === "partner", `object is ${me.object}`);
  check(me.status === "live", `account status is ${me.status}, expected live`);
  check(me.mode === "live", `key mode is ${me.mode}, expected live`);
  if (me.key === null) fail("the calling key is null");
  check(liveKey.endsWith(me.key.last4), `key.last4 ${me.key.last4} is not the end of the key in use`);
  const writeLimit: number = me.rate_limits.write.limit;
  check(writeLimit > 0, `rate_limits.write.limit is ${writeLimit}`);
  ok(`${me.id} (${me.tier}), key ${me.key.id} ...${me.key.last4}, write limit ${writeLimit}/${me.rate_limits.write.window_seconds}s`);
}

begin("balance");
const balanceBefore = await (async (): Promise<number> => {
  const { data, error } = await live.GET("/balance");
  if (error) fail(`GET /balance: ${describeError(error)}`);
  check(data.currency === "USD", `currency is ${data.currency}`);
  check(data.mode === "live", `mode is ${data.mode}`);
  check(data.balance_cents > 0, `balance is ${data.balance_cents}: the partner was not funded`);
  ok(`${data.balance_cents} cents, tier ${data.tier}, discount ${data.discount_bps} bps`);
  return data.balance_cents;
})();

// --- catalogue and price ----------------------------------------------------
begin("plans");
const plan = await (async () => {
  const { data, error } = await live.GET("/plans", {
    params: { query: { country: "fr", max_days: 7, limit: 5 } },
  });
  if (error) fail(`GET /plans: ${describeError(error)}`);
  check(data.data.length > 0, "no plan for FR of at most 7 days");
  for (const p of data.data) {
    check((p.country_code ?? "").toUpperCase() === "FR", `plan ${p.id} has country ${p.country_code ?? "null"}`);
    check(p.duration_days <= 7, `plan ${p.id} lasts ${p.duration_days} days`);
    check(p.available, `listed plan ${p.id} is not available`);
  }
  const first = data.data[0];
  if (first === undefined) fail("empty plan page");
  ok(`${data.data.length} plans, first ${first.id} at ${first.your_price_cents} cents (list ${first.list_price_cents})`);
  return first;
})();

begin("price");
const quantity = 2;
const quote = await (async () => {
  const { data, error } = await live.GET("/plans/{id}/price", {
    params: { path: { id: plan.id }, query: { quantity } },
  });
  if (error) fail(`GET /plans/${plan.id}/price: ${describeError(error)}`);
  check(data.plan_id === plan.id, `quote is for ${data.plan_id}`);
  check(data.quantity === quantity, `quote quantity ${data.quantity}`);
  check(data.unit_price_cents === plan.your_price_cents, `unit price ${data.unit_price_cents} != listed ${plan.your_price_cents}`);
  check(data.total_cents === data.unit_price_cents * quantity, `total ${data.total_cents} != ${quantity} x ${data.unit_price_cents}`);
  check(data.sufficient_balance, "quote says the balance is insufficient");
  const quoteMode: Mode = data.mode;
  check(quoteMode === "live", `quote mode ${quoteMode}`);
  ok(`${quantity} x ${data.unit_price_cents} = ${data.total_cents} cents (${data.price_source})`);
  return data;
})();

// --- order --------------------------------------------------------------------
begin("create order");
const idempotencyKey = `ts-flow-${randomUUID()}`;
const orderBody = { plan_id: plan.id, quantity, metadata: { customer_ref: "c-42" } };
const accepted = await (async (): Promise<OrderView> => {
  const { data, error, response } = await live.POST("/orders", {
    params: { header: { "Idempotency-Key": idempotencyKey } },
    body: orderBody,
  });
  if (error) fail(`POST /orders: HTTP ${response.status} ${describeError(error)}`);
  check(response.status === 202, `first delivery answered ${response.status}, expected 202`);
  check(data.status === "processing", `202 body status ${data.status}`);
  check(data.esims.length === 0, `202 body has ${data.esims.length} esims`);
  check(data.total_cents === quote.total_cents, `charged ${data.total_cents}, quoted ${quote.total_cents}`);
  const customerRef = data.metadata.customer_ref;
  check(customerRef === "c-42", `metadata.customer_ref came back as ${String(customerRef)}`);
  ok(`${data.id} accepted (202), ${data.total_cents} cents, metadata.customer_ref ${customerRef}`);
  return data;
})();

begin("replay order");
{
  const { data, error, response } = await live.POST("/orders", {
    params: { header: { "Idempotency-Key": idempotencyKey } },
    body: orderBody,
  });
  if (error) fail(`replayed POST /orders: HTTP ${response.status} ${describeError(error)}`);
  check(response.status === 200, `replay answered ${response.status}, expected 200`);
  check(response.headers.get("Idempotency-Replayed") === "true", "replay lacks Idempotency-Replayed: true");
  check(data.id === accepted.id, `replay is order ${data.id}, not ${accepted.id}`);
  ok(`same order ${data.id}, Idempotency-Replayed: true`);
}

begin("poll order");
const order = await (async (): Promise<OrderView> => {
  const deadline = Date.now() + deadlineMs;
  let current: OrderView = accepted;
  let polls = 0;
  while (orderOutcome(current.status) === "wait") {
    const pause = current.poll_after_ms ?? 1000;
    if (Date.now() + pause > deadline) fail(`order ${current.id} still ${current.status} after ${deadlineMs} ms`);
    await sleep(pause);
    const { data, error } = await live.GET("/orders/{id}", { params: { path: { id: accepted.id } } });
    if (error) fail(`GET /orders/${accepted.id}: ${describeError(error)}`);
    current = data;
    polls += 1;
  }
  const outcome = orderOutcome(current.status);
  check(current.status === "completed", `order ended ${current.status} (${outcome}), failure_code ${current.failure_code ?? "null"}`);
  check(current.poll_after_ms === null || current.poll_after_ms === undefined, `settled order still asks to poll after ${String(current.poll_after_ms)} ms`);
  check(current.esims.length === quantity, `completed order has ${current.esims.length} esims, expected ${quantity}`);
  check(current.failure_code === null || current.failure_code === undefined, `completed order has failure_code ${String(current.failure_code)}`);
  check(typeof current.completed_at === "string", "completed order has no completed_at");
  const ref = current.metadata.customer_ref;
  check(ref === "c-42", `metadata.customer_ref read back as ${String(ref)}`);
  ok(`${current.status} after ${polls} polls, ${current.esims.length} esims, metadata.customer_ref ${ref}`);
  return current;
})();

// --- the eSIM -------------------------------------------------------------------
begin("esim install");
const esim = order.esims[0];
if (esim === undefined) fail("the order has no esim");
{
  const { data, error } = await live.GET("/esims/{iccid}/install", { params: { path: { iccid: esim.iccid } } });
  if (error) fail(`GET /esims/${esim.iccid}/install: ${describeError(error)}`);
  check(data.iccid === esim.iccid, `install payload is for ${data.iccid}`);
  check(data.activation_code.includes(data.smdp_address) && data.activation_code.includes(data.matching_id),
    `activation code ${data.activation_code} does not carry the SM-DP+ address and matching id`);
  check(data.apple_install_url.startsWith("https://"), `apple_install_url ${data.apple_install_url}`);
  check(data.qr_code_svg.includes("<svg"), "qr_code_svg is not an SVG");
  const png = Buffer.from(data.qr_code_png_base64, "base64");
  check(png.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])), "qr_code_png_base64 is not a PNG");
  ok(`${data.iccid}: ${data.activation_code}, PNG ${png.length} bytes`);
}

begin("esim usage");
{
  const { data, error } = await live.GET("/esims/{iccid}/usage", { params: { path: { iccid: esim.iccid } } });
  if (error) fail(`GET /esims/${esim.iccid}/usage: ${describeError(error)}`);
  check(data.iccid === esim.iccid, `usage is for ${data.iccid}`);
  check(data.data_used_mb >= 0, `data_used_mb ${data.data_used_mb}`);
  ok(`status ${data.status}, used ${data.data_used_mb} MB, remaining ${data.data_remaining_mb ?? "n/a"} MB`);
}

// --- money ----------------------------------------------------------------------
begin("ledger");
{
  const { data, error } = await live.GET("/ledger", { params: { query: { kind: "purchase", limit: 50 } } });
  if (error) fail(`GET /ledger: ${describeError(error)}`);
  const purchase = data.data.find((entry) => entry.order_id === order.id);
  if (purchase === undefined) fail(`no purchase entry for ${order.id} among ${data.data.length}`);
  check(purchase.kind === "purchase", `entry kind ${purchase.kind}`);
  check(purchase.amount_cents === -order.total_cents, `purchase amount ${purchase.amount_cents}, order total ${order.total_cents}`);
  ok(`${purchase.id} seq ${purchase.seq}: ${purchase.amount_cents} cents, balance after ${purchase.balance_after_cents}`);
}

begin("balance after order");
{
  const { data, error } = await live.GET("/balance");
  if (error) fail(`GET /balance: ${describeError(error)}`);
  check(data.balance_cents === balanceBefore - order.total_cents,
    `balance ${data.balance_cents}, expected ${balanceBefore} - ${order.total_cents}`);
  ok(`${balanceBefore} -> ${data.balance_cents} cents`);
}

begin("deposit");
const depositCents = 25000;
const deposit = await (async (): Promise<DepositView> => {
  const { data, error, response } = await live.POST("/deposits", { body: { amount_cents: depositCents } });
  if (error) fail(`POST /deposits: HTTP ${response.status} ${describeError(error)}`);
  check(response.status === 201, `POST /deposits answered ${response.status}`);
  check(data.status === "pending", `new deposit is ${data.status}`);
  check(data.requested_cents === depositCents, `requested ${data.requested_cents}`);
  check(data.credited_cents === null, `new deposit credited ${String(data.credited_cents)}`);
  check(typeof data.payment_url === "string" && typeof data.expires_at === "string", "invoice has no payment_url or expires_at");
  ok(`${data.id} ${data.status}: ${depositChannel(data)}`);
  return data;
})();

begin("read deposit");
{
  const { data, error } = await live.GET("/deposits/{id}", { params: { path: { id: deposit.id } } });
  if (error) fail(`GET /deposits/${deposit.id}: ${describeError(error)}`);
  check(data.id === deposit.id && data.requested_cents === depositCents, `read back ${data.id} of ${data.requested_cents}`);
  ok(`${data.id} ${data.status}, ${depositChannel(data)}`);
}

if (simUrl !== "") {
  // Paying the invoice is the payer's business, not the partner API's: the
  // simulated provider's control route stands in for a wallet.
  begin("pay deposit");
  const paid = await fetch(`${simUrl}/sim/payments/deposits/${deposit.id}/events`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ event: "paid", amount_cents: depositCents }),
  });
  check(paid.ok, `simulated payment answered ${paid.status}`);
  const deadline = Date.now() + deadlineMs;
  let credited: DepositView = deposit;
  while (credited.status === "pending") {
    if (Date.now() > deadline) fail(`deposit ${deposit.id} still pending after ${deadlineMs} ms`);
    await sleep(200);
    const { data, error } = await live.GET("/deposits/{id}", { params: { path: { id: deposit.id } } });
    if (error) fail(`GET /deposits/${deposit.id}: ${describeError(error)}`);
    credited = data;
  }
  check(credited.status === "credited", `deposit ended ${credited.status}`);
  check(credited.credited_cents === depositCents, `credited ${String(credited.credited_cents)}`);
  if (typeof credited.ledger_entry_id !== "string") fail("credited deposit has no ledger_entry_id");
  const ledgerEntryId = credited.ledger_entry_id;
  const { data: ledger, error } = await live.GET("/ledger", { params: { query: { kind: "deposit" } } });
  if (error) fail(`GET /ledger: ${describeError(error)}`);
  const entry = ledger.data.find((row) => row.id === ledgerEntryId);
  if (entry === undefined) fail(`ledger has no entry ${ledgerEntryId}`);
  check(entry.deposit_id === deposit.id && entry.amount_cents === depositCents, `entry ${entry.id}: ${entry.amount_cents} for ${String(entry.deposit_id)}`);
  ok(`${credited.id} credited ${credited.credited_cents} cents, ledger ${entry.id}`);
}

// --- typed refusals ---------------------------------------------------------------
begin("error: unknown plan");
{
  const { data, error, response } = await live.POST("/orders", {
    params: { header: { "Idempotency-Key": `ts-flow-${randomUUID()}` } },
    body: { plan_id: "pl_no_such_plan_anywhere", quantity: 1 },
  });
  if (!error) fail(`an order for an unknown plan was accepted: ${data.id}`);
  expectRefusal(error.error.code, "plan.not_found", response.status, 404);
  ok(`HTTP ${response.status} ${error.error.code}, param ${error.error.param ?? "null"}`);
}

begin("error: insufficient balance (sandbox fixture)");
{
  const { data, error, response } = await sandbox.POST("/orders", {
    params: { header: { "Idempotency-Key": `ts-flow-${randomUUID()}` } },
    body: { plan_id: "pl_sandbox_insufficient_balance" },
  });
  if (!error) fail(`the insufficient-balance fixture was accepted: ${data.id}`);
  expectRefusal(error.error.code, "balance.insufficient", response.status, 402);
  ok(`HTTP ${response.status} ${error.error.code}`);
}

begin("error: deposit with a sandbox key");
{
  const { data, error, response } = await sandbox.POST("/deposits", { body: { amount_cents: depositCents } });
  if (!error) fail(`a sandbox key opened deposit ${data.id}`);
  expectRefusal(error.error.code, "forbidden", response.status, 403);
  check(error.error["mode"] === "sandbox", `refusal carries mode ${String(error.error["mode"])}`);
  ok(`HTTP ${response.status} ${error.error.code}, mode ${String(error.error["mode"])}`);
}

console.log("typescript flow passed");
