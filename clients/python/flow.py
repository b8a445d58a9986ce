"""A partner's integration through the client openapi-python-client generates
from the published openapi.json (package `esim_partner_client`), driving the
same flow as clients/typescript/flow.ts through the typed API functions
(`sync_detailed`), narrowing every answer with isinstance checks on the
generated models. `mypy --strict` runs on this file before it runs.

Environment (set by scripts/clients.sh):
  ESIM_BASE_URL      http://127.0.0.1:PORT/partner/v1
  ESIM_LIVE_KEY      svc_sk_live_... of a live, funded partner
  ESIM_SANDBOX_KEY   svc_sk_test_... of the same partner
  ESIM_SIM_URL       optional: the simulators listener, to pay the deposit
  ESIM_FLOW_DEADLINE_MS  optional: how long to wait for provisioning and credit (default 60000)
"""

from __future__ import annotations

import base64
import datetime
import os
import sys
import time
import uuid
from typing import NoReturn, TypeVar, assert_never

import httpx
from esim_partner_client import AuthenticatedClient, Client
from esim_partner_client.api.account import get_balance, get_me, list_ledger
from esim_partner_client.api.catalogue import get_plan_price, list_plans
from esim_partner_client.api.deposits import create_deposit, get_deposit
from esim_partner_client.api.esims import get_esim_install, get_esim_usage
from esim_partner_client.api.health import get_health
from esim_partner_client.api.orders import create_order, get_order
from esim_partner_client.models import (
    AccountStatus,
    DepositStatus,
    DepositView,
    Error,
    ErrorCode,
    LedgerKind,
    Mode,
    NewDeposit,
    OrderBody,
    OrderBodyMetadataType0,
    OrderStatus,
    OrderView,
)
from esim_partner_client.types import Response, Unset

STEP = "start"
T = TypeVar("T")


def fail(message: str) -> NoReturn:
    print(f'python flow FAILED at step "{STEP}": {message}', file=sys.stderr)
    sys.exit(1)


def check(condition: bool, message: str) -> None:
    if not condition:
        fail(message)


def begin(name: str) -> None:
    global STEP
    STEP = name


def ok(message: str) -> None:
    print(f"  ok  {STEP}: {message}", flush=True)


def env(name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        fail(f"environment variable {name} is not set")
    return value


def describe(response: Response[T]) -> str:
    """A failed call as a partner logs it: status, code, message, request id."""
    parsed = response.parsed
    if isinstance(parsed, Error):
        e = parsed.error
        return f"HTTP {response.status_code.value} {e.code.value} ({e.message}; request {e.request_id})"
    return f"HTTP {response.status_code.value} {response.content[:300]!r}"


def order_outcome(status: OrderStatus) -> str:
    """What a partner does with each status; mypy checks the match is exhaustive."""
    match status:
        case OrderStatus.PROCESSING:
            return "wait"
        case OrderStatus.COMPLETED:
            return "deliver"
        case OrderStatus.PARTIALLY_COMPLETED:
            return "deliver_part"
        case OrderStatus.FAILED:
            return "refunded"
        case _:
            assert_never(status)


def expect_refusal(response: Response[T], want: ErrorCode, want_status: int) -> Error:
    parsed = response.parsed
    if not isinstance(parsed, Error):
        fail(f"expected {want.value}, got {describe(response)}")
    code = parsed.error.code
    match code:
        case ErrorCode.PLAN_NOT_FOUND | ErrorCode.BALANCE_INSUFFICIENT | ErrorCode.FORBIDDEN:
            check(code is want, f"expected {want.value}, got {code.value}")
            check(
                response.status_code.value == want_status,
                f"expected HTTP {want_status} for {code.value}, got {response.status_code.value}",
            )
        case (
            ErrorCode.RATE_LIMIT_EXCEEDED
            | ErrorCode.SUPPLIER_ERROR
            | ErrorCode.SERVICE_UNAVAILABLE
            | ErrorCode.INTERNAL_ERROR
        ):
            fail(f"transient refusal {code.value} where {want.value} was expected")
        case _:
            fail(f"unexpected error code {code.value} (HTTP {response.status_code.value}) where {want.value} was expected")
    return parsed


def main() -> None:
    base_url = env("ESIM_BASE_URL")
    live_key = env("ESIM_LIVE_KEY")
    sandbox_key = env("ESIM_SANDBOX_KEY")
    sim_url = os.environ.get("ESIM_SIM_URL", "")
    deadline_s = int(os.environ.get("ESIM_FLOW_DEADLINE_MS", "60000")) / 1000

    live = AuthenticatedClient(base_url=base_url, token=live_key, raise_on_unexpected_status=True)
    sandbox = AuthenticatedClient(base_url=base_url, token=sandbox_key, raise_on_unexpected_status=True)
    anonymous = Client(base_url=base_url, raise_on_unexpected_status=True)

    # --- health ------------------------------------------------------------
    begin("health")
    r_health = get_health.sync_detailed(client=anonymous)
    health = r_health.parsed
    if isinstance(health, Error) or health is None:
        fail(f"GET /health: {describe(r_health)}")
    check(health.status == "ok" and health.database == "ok", f"health {health.status}, database {health.database}")
    ok(f"status {health.status}, database {health.database}, up {health.uptime_seconds}s")

    # --- who am I, and what do I hold ------------------------------------
    begin("me")
    r_me = get_me.sync_detailed(client=live)
    me = r_me.parsed
    if isinstance(me, Error) or me is None:
        fail(f"GET /me: {describe(r_me)}")
    check(me.object_ == "partner", f"object {me.object_}")
    check(me.status is AccountStatus.LIVE, f"account status {me.status.value}")
    check(me.mode is Mode.LIVE, f"key mode {me.mode.value}")
    key = me.key
    if key is None or isinstance(key, Unset):
        fail("the calling key is absent or null")
    check(live_key.endswith(key.last4), f"key.last4 {key.last4} is not the end of the key in use")
    ok(f"{me.id} ({me.tier}), key {key.id} ...{key.last4}")

    begin("balance")
    r_bal = get_balance.sync_detailed(client=live)
    bal = r_bal.parsed
    if isinstance(bal, Error) or bal is None:
        fail(f"GET /balance: {describe(r_bal)}")
    check(bal.currency == "USD", f"currency {bal.currency}")
    check(bal.mode is Mode.LIVE, f"mode {bal.mode.value}")
    check(bal.balance_cents > 0, f"balance {bal.balance_cents}: the partner was not funded")
    balance_before = bal.balance_cents
    ok(f"{bal.balance_cents} cents, tier {bal.tier}, discount {bal.discount_bps} bps")

    # --- catalogue and price ---------------------------------------------
    begin("plans")
    r_plans = list_plans.sync_detailed(client=live, country="fr", max_days=7, limit=5)
    plans = r_plans.parsed
    if isinstance(plans, Error) or plans is None:
        fail(f"GET /plans: {describe(r_plans)}")
    check(len(plans.data) > 0, "no plan for FR of at most 7 days")
    for p in plans.data:
        country = p.country_code if isinstance(p.country_code, str) else ""
        check(country.upper() == "FR", f"plan {p.id} has country {p.country_code!r}")
        check(p.duration_days <= 7, f"plan {p.id} lasts {p.duration_days} days")
        check(p.available, f"listed plan {p.id} is not available")
    plan = plans.data[0]
    ok(f"{len(plans.data)} plans, first {plan.id} at {plan.your_price_cents} cents (list {plan.list_price_cents})")

    begin("price")
    quantity = 2
    r_quote = get_plan_price.sync_detailed(plan.id, client=live, quantity=quantity)
    quote = r_quote.parsed
    if isinstance(quote, Error) or quote is None:
        fail(f"GET /plans/{plan.id}/price: {describe(r_quote)}")
    check(quote.plan_id == plan.id, f"quote is for {quote.plan_id}")
    check(quote.unit_price_cents == plan.your_price_cents, f"unit {quote.unit_price_cents} != listed {plan.your_price_cents}")
    check(quote.total_cents == quote.unit_price_cents * quantity, f"total {quote.total_cents}")
    check(quote.sufficient_balance, "quote says the balance is insufficient")
    quote_mode: Mode = quote.mode
    check(quote_mode == Mode.LIVE, f"quote mode {quote_mode}")
    ok(f"{quantity} x {quote.unit_price_cents} = {quote.total_cents} cents ({quote.price_source})")

    # --- order -------------------------------------------------------------
    begin("create order")
    idempotency_key = f"py-flow-{uuid.uuid4()}"
    metadata = OrderBodyMetadataType0()
    metadata["customer_ref"] = "c-42"
    body = OrderBody(plan_id=plan.id, quantity=quantity, metadata=metadata)
    r_order = create_order.sync_detailed(client=live, body=body, idempotency_key=idempotency_key)
    accepted = r_order.parsed
    if isinstance(accepted, Error) or accepted is None:
        fail(f"POST /orders: {describe(r_order)}")
    check(r_order.status_code.value == 202, f"first delivery answered {r_order.status_code.value}, expected 202")
    check(accepted.status is OrderStatus.PROCESSING, f"202 body status {accepted.status.value}")
    check(accepted.esims == [], f"202 body has {len(accepted.esims)} esims")
    check(accepted.total_cents == quote.total_cents, f"charged {accepted.total_cents}, quoted {quote.total_cents}")
    customer_ref = accepted.metadata["customer_ref"]
    check(customer_ref == "c-42", f"metadata.customer_ref came back as {customer_ref!r}")
    ok(f"{accepted.id} accepted (202), {accepted.total_cents} cents, metadata.customer_ref {customer_ref}")

    begin("replay order")
    r_replay = create_order.sync_detailed(client=live, body=body, idempotency_key=idempotency_key)
    replay = r_replay.parsed
    if isinstance(replay, Error) or replay is None:
        fail(f"replayed POST /orders: {describe(r_replay)}")
    check(r_replay.status_code.value == 200, f"replay answered {r_replay.status_code.value}")
    check(r_replay.headers.get("Idempotency-Replayed") == "true", "replay lacks Idempotency-Replayed: true")
    check(replay.id == accepted.id, f"replay is {replay.id}, not {accepted.id}")
    ok(f"same order {replay.id}, Idempotency-Replayed: true")

    begin("poll order")
    deadline = time.monotonic() + deadline_s
    order: OrderView = accepted
    polls = 0
    while order_outcome(order.status) == "wait":
        pause_ms = order.poll_after_ms if isinstance(order.poll_after_ms, int) else 1000
        if time.monotonic() + pause_ms / 1000 > deadline:
            fail(f"order {order.id} still {order.status.value} after {deadline_s}s")
        time.sleep(pause_ms / 1000)
        r_get = get_order.sync_detailed(accepted.id, client=live)
        got = r_get.parsed
        if isinstance(got, Error) or got is None:
            fail(f"GET /orders/{accepted.id}: {describe(r_get)}")
        order = got
        polls += 1
    check(
        order.status is OrderStatus.COMPLETED,
        f"order ended {order.status.value} ({order_outcome(order.status)}), failure_code {order.failure_code!r}",
    )
    check(not isinstance(order.poll_after_ms, int), f"settled order still asks to poll after {order.poll_after_ms} ms")
    check(len(order.esims) == quantity, f"completed order has {len(order.esims)} esims")
    check(order.failure_code is None or isinstance(order.failure_code, Unset), f"failure_code {order.failure_code!r}")
    check(isinstance(order.completed_at, datetime.datetime), f"completed_at {order.completed_at!r}")
    ref = order.metadata["customer_ref"]
    check(ref == "c-42", f"metadata.customer_ref read back as {ref!r}")
    ok(f"{order.status.value} after {polls} polls, {len(order.esims)} esims, metadata.customer_ref {ref}")

    # --- the eSIM ------------------------------------------------------------
    esim = order.esims[0]
    begin("esim install")
    r_inst = get_esim_install.sync_detailed(esim.iccid, client=live)
    inst = r_inst.parsed
    if isinstance(inst, Error) or inst is None:
        fail(f"GET /esims/{esim.iccid}/install: {describe(r_inst)}")
    check(inst.iccid == esim.iccid, f"install payload is for {inst.iccid}")
    check(
        inst.smdp_address in inst.activation_code and inst.matching_id in inst.activation_code,
        f"activation code {inst.activation_code} lacks the SM-DP+ address or matching id",
    )
    check(inst.apple_install_url.startswith("https://"), f"apple_install_url {inst.apple_install_url}")
    check("<svg" in inst.qr_code_svg, "qr_code_svg is not an SVG")
    png = base64.b64decode(inst.qr_code_png_base64)
    check(png.startswith(b"\x89PNG\r\n\x1a\n"), "qr_code_png_base64 is not a PNG")
    ok(f"{inst.iccid}: {inst.activation_code}, PNG {len(png)} bytes")

    begin("esim usage")
    r_use = get_esim_usage.sync_detailed(esim.iccid, client=live)
    use = r_use.parsed
    if isinstance(use, Error) or use is None:
        fail(f"GET /esims/{esim.iccid}/usage: {describe(r_use)}")
    check(use.iccid == esim.iccid, f"usage is for {use.iccid}")
    check(use.data_used_mb >= 0, f"data_used_mb {use.data_used_mb}")
    ok(f"status {use.status.value}, used {use.data_used_mb} MB, remaining {use.data_remaining_mb!r} MB")

    # --- money ---------------------------------------------------------------
    begin("ledger")
    r_led = list_ledger.sync_detailed(client=live, kind=LedgerKind.PURCHASE, limit=50)
    led = r_led.parsed
    if isinstance(led, Error) or led is None:
        fail(f"GET /ledger: {describe(r_led)}")
    purchases = [e for e in led.data if e.order_id == order.id]
    check(len(purchases) == 1, f"{len(purchases)} purchase entries for {order.id} among {len(led.data)}")
    purchase = purchases[0]
    check(purchase.kind is LedgerKind.PURCHASE, f"entry kind {purchase.kind.value}")
    check(purchase.amount_cents == -order.total_cents, f"purchase {purchase.amount_cents}, order total {order.total_cents}")
    ok(f"{purchase.id} seq {purchase.seq}: {purchase.amount_cents} cents, balance after {purchase.balance_after_cents}")

    begin("balance after order")
    r_bal2 = get_balance.sync_detailed(client=live)
    bal2 = r_bal2.parsed
    if isinstance(bal2, Error) or bal2 is None:
        fail(f"GET /balance: {describe(r_bal2)}")
    check(
        bal2.balance_cents == balance_before - order.total_cents,
        f"balance {bal2.balance_cents}, expected {balance_before} - {order.total_cents}",
    )
    ok(f"{balance_before} -> {bal2.balance_cents} cents")

    begin("deposit")
    deposit_cents = 25000
    r_dep = create_deposit.sync_detailed(client=live, body=NewDeposit(amount_cents=deposit_cents))
    dep = r_dep.parsed
    if isinstance(dep, Error) or dep is None:
        fail(f"POST /deposits: {describe(r_dep)}")
    check(r_dep.status_code.value == 201, f"POST /deposits answered {r_dep.status_code.value}")
    check(dep.status is DepositStatus.PENDING, f"new deposit is {dep.status.value}")
    check(dep.requested_cents == deposit_cents, f"requested {dep.requested_cents}")
    check(dep.credited_cents is None, f"new deposit credited {dep.credited_cents!r}")
    check(isinstance(dep.payment_url, str), f"payment_url {dep.payment_url!r}")
    check(dep.method == "crypto", f"method {dep.method}")
    ok(f"{dep.id} {dep.status.value}: {dep.method} invoice {dep.payment_url}")

    begin("read deposit")
    r_dep2 = get_deposit.sync_detailed(dep.id, client=live)
    dep2 = r_dep2.parsed
    if isinstance(dep2, Error) or dep2 is None:
        fail(f"GET /deposits/{dep.id}: {describe(r_dep2)}")
    check(dep2.id == dep.id and dep2.requested_cents == deposit_cents, f"read back {dep2.id} of {dep2.requested_cents}")
    ok(f"{dep2.id} {dep2.status.value}")

    if sim_url:
        # Paying the invoice is the payer's business, not the partner API's: the
        # simulated provider's control route stands in for a wallet.
        begin("pay deposit")
        paid = httpx.post(
            f"{sim_url}/sim/payments/deposits/{dep.id}/events",
            json={"event": "paid", "amount_cents": deposit_cents},
        )
        check(paid.is_success, f"simulated payment answered {paid.status_code}")
        credited: DepositView = dep2
        deadline = time.monotonic() + deadline_s
        while credited.status is DepositStatus.PENDING:
            if time.monotonic() > deadline:
                fail(f"deposit {dep.id} still pending after {deadline_s}s")
            time.sleep(0.2)
            r_d = get_deposit.sync_detailed(dep.id, client=live)
            d = r_d.parsed
            if isinstance(d, Error) or d is None:
                fail(f"GET /deposits/{dep.id}: {describe(r_d)}")
            credited = d
        check(credited.status is DepositStatus.CREDITED, f"deposit ended {credited.status.value}")
        check(credited.credited_cents == deposit_cents, f"credited {credited.credited_cents!r}")
        entry_id = credited.ledger_entry_id
        if not isinstance(entry_id, str):
            fail(f"credited deposit has ledger_entry_id {entry_id!r}")
        r_l = list_ledger.sync_detailed(client=live, kind=LedgerKind.DEPOSIT)
        ledger = r_l.parsed
        if isinstance(ledger, Error) or ledger is None:
            fail(f"GET /ledger: {describe(r_l)}")
        entries = [e for e in ledger.data if e.id == entry_id]
        check(len(entries) == 1, f"ledger has no entry {entry_id}")
        check(
            entries[0].deposit_id == dep.id and entries[0].amount_cents == deposit_cents,
            f"entry {entry_id}: {entries[0].amount_cents} for {entries[0].deposit_id!r}",
        )
        ok(f"{credited.id} credited {credited.credited_cents} cents, ledger {entry_id}")

    # --- typed refusals ---------------------------------------------------------
    begin("error: unknown plan")
    r_bad = create_order.sync_detailed(
        client=live,
        body=OrderBody(plan_id="pl_no_such_plan_anywhere", quantity=1),
        idempotency_key=f"py-flow-{uuid.uuid4()}",
    )
    refusal = expect_refusal(r_bad, ErrorCode.PLAN_NOT_FOUND, 404)
    ok(f"HTTP {r_bad.status_code.value} {refusal.error.code.value}, param {refusal.error.param!r}")

    begin("error: insufficient balance (sandbox fixture)")
    r_poor = create_order.sync_detailed(
        client=sandbox,
        body=OrderBody(plan_id="pl_sandbox_insufficient_balance"),
        idempotency_key=f"py-flow-{uuid.uuid4()}",
    )
    refusal = expect_refusal(r_poor, ErrorCode.BALANCE_INSUFFICIENT, 402)
    ok(f"HTTP {r_poor.status_code.value} {refusal.error.code.value}")

    begin("error: deposit with a sandbox key")
    r_sdep = create_deposit.sync_detailed(client=sandbox, body=NewDeposit(amount_cents=deposit_cents))
    refusal = expect_refusal(r_sdep, ErrorCode.FORBIDDEN, 403)
    mode = refusal.error.additional_properties.get("mode")
    check(mode == "sandbox", f"refusal carries mode {mode!r}")
    ok(f"HTTP {r_sdep.status_code.value} {refusal.error.code.value}, mode {mode}")

    # Last, so the rest of the flow runs even where the document leaves the
    # bands untyped: `rate_limits` is `{read, write, supplier, catalogue}`, each
    # `{limit, window_seconds}` (spec, Partner resource).
    begin("rate limits")
    write_band = me.rate_limits.write
    check(write_band.limit > 0, f"rate_limits.write.limit {write_band.limit}")
    ok(f"write {write_band.limit}/{write_band.window_seconds}s, read {me.rate_limits.read.limit}/{me.rate_limits.read.window_seconds}s")

    print("python flow passed")


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:  # a partner's top level: log what broke and where
        import traceback

        traceback.print_exc()
        fail(f"{type(exc).__name__}: {exc}")
