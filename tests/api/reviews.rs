//! Deciding deposit reviews: `POST /reviews/{id}/approve` moves the amount
//! in question once, through the partner's account actor; `/reject` and
//! `/resolve` close a review without moving money; a review is decided once,
//! however many operators (or double-clicked forms) try at the same time.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::{
    deposits::{
        deposits_app, id_of, live_float, open_deposit, reviews_of, show_deposit, sim_event,
        sim_pay, the_review_of, whole_ledger,
    },
    helpers::{TestApp, assert_error, balance, live_partner, read},
    operator::admin,
};

/// A deposit credited with 20,000 cents of 50,000, then paid 30,000 more
/// after the credit: its `paid_after_credit` review (30,000 in question).
pub(crate) async fn paid_after_credit(app: &TestApp, secret: &str) -> (String, Value) {
    let id = id_of(&open_deposit(app, secret, 50_000).await);
    sim_pay(app, &id, "partial", 20_000, "chain").await;
    sim_pay(app, &id, "expire", 0, "chain").await;
    sim_pay(app, &id, "paid_late", 30_000, "lightning").await;
    let review = the_review_of(app, &id, "paid_after_credit").await;
    (id, review)
}

/// Posts a decision (`approve`, `reject` or `resolve`) with `body`.
pub(crate) async fn decide(
    app: &TestApp,
    review_id: &str,
    action: &str,
    body: Value,
) -> (StatusCode, Value) {
    read(
        app.operator(Method::POST, &format!("/reviews/{review_id}/{action}"))
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await
}

fn id(review: &Value) -> &str {
    review["id"].as_str().unwrap()
}

#[tokio::test]
async fn approving_money_paid_after_a_credit_credits_it_once_with_one_ledger_row() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let (deposit_id, review) = paid_after_credit(&app, &secret).await;
    assert_eq!(review["amount_cents"], 30_000, "{review}");
    assert_eq!(balance(&app, &secret).await, 20_000);
    let ledger_before = whole_ledger(&app, &secret).await;

    let (status, approved) = decide(
        &app,
        id(&review),
        "approve",
        json!({ "note": "paid on chain, checked" }),
    )
    .await;

    assert_eq!(status, StatusCode::OK, "{approved}");
    assert_eq!(approved["status"], "approved");
    assert_eq!(approved["resolution"], "paid on chain, checked");
    assert_eq!(balance(&app, &secret).await, 50_000);
    let ledger = whole_ledger(&app, &secret).await;
    assert_eq!(
        ledger.len(),
        ledger_before.len() + 1,
        "one row more: {ledger:#?}"
    );
    let row = ledger
        .iter()
        .find(|r| r["id"] == approved["ledger_entry_id"])
        .expect("the approval's row");
    assert_eq!(row["kind"], "deposit");
    assert_eq!(row["amount_cents"], 30_000);
    assert_eq!(row["balance_after_cents"], 50_000);
    assert_eq!(row["deposit_id"], deposit_id.as_str());
    // The deposit keeps what the provider's settlement credited.
    assert_eq!(
        show_deposit(&app, &secret, &deposit_id).await["status"],
        "credited"
    );

    // Decided once: every later decision is a 409 and moves nothing.
    for (action, body) in [
        ("approve", json!({ "note": "again" })),
        ("reject", json!({ "note": "changed my mind" })),
        ("resolve", json!({ "resolution": "closing" })),
    ] {
        let (status, error) = decide(&app, id(&review), action, body).await;
        assert_error(status, &error, 409, "conflict");
    }
    assert_eq!(balance(&app, &secret).await, 50_000);
    assert_eq!(whole_ledger(&app, &secret).await.len(), ledger.len());
}

#[tokio::test]
async fn approvals_racing_on_one_review_move_the_money_exactly_once() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let (_, review) = paid_after_credit(&app, &secret).await;
    let review_id = id(&review).to_owned();

    let attempts = (0..12).map(|i| {
        let (app, review_id) = (&app, review_id.clone());
        async move {
            decide(
                app,
                &review_id,
                "approve",
                json!({ "note": format!("operator {i}") }),
            )
            .await
            .0
        }
    });
    let statuses = futures::future::join_all(attempts).await;

    let approved = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    let refused = statuses
        .iter()
        .filter(|s| **s == StatusCode::CONFLICT)
        .count();
    assert_eq!((approved, refused), (1, 11), "{statuses:?}");
    assert_eq!(balance(&app, &secret).await, 50_000, "credited once");
}

#[tokio::test]
async fn approving_money_on_an_invalid_invoice_credits_the_deposit_itself() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let deposit_id = id_of(&open_deposit(&app, &secret, 50_000).await);
    sim_pay(&app, &deposit_id, "unconfirmed", 50_000, "chain").await;
    sim_pay(&app, &deposit_id, "invalid", 0, "chain").await;
    let review = the_review_of(&app, &deposit_id, "invalid_with_payment").await;
    assert_eq!(
        show_deposit(&app, &secret, &deposit_id).await["status"],
        "cancelled"
    );

    let (status, approved) = decide(
        &app,
        id(&review),
        "approve",
        json!({ "note": "confirmed late on chain" }),
    )
    .await;

    assert_eq!(status, StatusCode::OK, "{approved}");
    let deposit = show_deposit(&app, &secret, &deposit_id).await;
    assert_eq!(deposit["status"], "credited", "{deposit}");
    assert_eq!(deposit["credited_cents"], 50_000, "{deposit}");
    assert_eq!(balance(&app, &secret).await, 50_000);
}

#[tokio::test]
async fn approving_a_refund_after_credit_takes_the_money_back_and_reverses_the_deposit() {
    let app = deposits_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    let deposit_id = id_of(&open_deposit(&app, &secret, 10_000).await);
    sim_event(&app, &deposit_id, "paid", 10_000).await;
    sim_event(&app, &deposit_id, "refund", 0).await;
    let review = the_review_of(&app, &deposit_id, "refunded_after_credit").await;
    // The simulated store refunds in BTC: what is in question is the whole credit.
    let amount = review["amount_cents"].as_i64().unwrap();
    assert_eq!(amount, 10_000, "{review}");

    let (status, approved) = decide(
        &app,
        id(&review),
        "approve",
        json!({ "note": "refund confirmed" }),
    )
    .await;

    assert_eq!(status, StatusCode::OK, "{approved}");
    assert_eq!(live_float(&app, &partner_id).await, 10_000 - amount);
    let row = whole_ledger(&app, &secret)
        .await
        .into_iter()
        .find(|r| r["id"] == approved["ledger_entry_id"])
        .expect("the approval's row");
    assert_eq!(row["kind"], "chargeback");
    assert_eq!(row["amount_cents"], -amount);
    assert_eq!(
        show_deposit(&app, &secret, &deposit_id).await["status"],
        "reversed"
    );
}

#[tokio::test]
async fn a_zero_settlement_cannot_be_approved_and_a_rejection_moves_nothing() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let deposit_id = id_of(&open_deposit(&app, &secret, 10_000).await);
    sim_event(&app, &deposit_id, "zero", 0).await;
    let review = the_review_of(&app, &deposit_id, "zero_settlement").await;

    let (status, error) =
        decide(&app, id(&review), "approve", json!({ "note": "credit it" })).await;
    let error = assert_error(status, &error, 409, "conflict");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("nothing to credit"),
        "{error}"
    );

    let (status, rejected) = decide(
        &app,
        id(&review),
        "reject",
        json!({ "note": "nothing arrived" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{rejected}");
    assert_eq!(rejected["status"], "rejected");
    assert!(rejected["ledger_entry_id"].is_null(), "{rejected}");
    assert_eq!(balance(&app, &secret).await, 0);
    assert_eq!(reviews_of(&app, &deposit_id).await[0]["status"], "rejected");
}

#[tokio::test]
async fn a_decision_without_a_note_or_on_no_review_is_refused_naming_why() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let (_, review) = paid_after_credit(&app, &secret).await;

    for body in [json!({ "note": "  " }), json!({ "note": "x".repeat(501) })] {
        let (status, error) = decide(&app, id(&review), "approve", body).await;
        assert_eq!(
            assert_error(status, &error, 400, "request.invalid")["param"],
            "note"
        );
    }
    let (status, error) = decide(&app, id(&review), "approve", json!({})).await;
    assert_error(status, &error, 400, "request.invalid");
    let (status, error) = decide(&app, "rev_nonexistent", "approve", json!({ "note": "x" })).await;
    assert_error(status, &error, 404, "not_found");
    let (status, error) = decide(&app, "rev_nonexistent", "reject", json!({ "note": "x" })).await;
    assert_error(status, &error, 404, "not_found");
    assert_eq!(balance(&app, &secret).await, 20_000, "nothing moved");
    assert_eq!(
        the_review_of(
            &app,
            review["deposit_id"].as_str().unwrap(),
            "paid_after_credit"
        )
        .await["status"],
        "open"
    );
}

#[tokio::test]
async fn the_admin_cli_lists_approves_and_rejects_reviews() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let (_, review) = paid_after_credit(&app, &secret).await;
    let zero = id_of(&open_deposit(&app, &secret, 10_000).await);
    sim_event(&app, &zero, "zero", 0).await;
    let zero_review = the_review_of(&app, &zero, "zero_settlement").await;

    let (ok, open) = admin(&app, &["money", "reviews", "--status", "open"]).await;
    assert!(ok, "{open}");
    assert_eq!(open["data"].as_array().unwrap().len(), 2, "{open}");

    let (ok, approved) = admin(
        &app,
        &["money", "approve", id(&review), "--note", "checked"],
    )
    .await;
    assert!(ok, "{approved}");
    assert_eq!(approved["status"], "approved");
    assert_eq!(balance(&app, &secret).await, 50_000);
    let (ok, refused) = admin(&app, &["money", "approve", id(&zero_review), "--note", "x"]).await;
    assert!(!ok, "a 409 exits non-zero");
    assert_eq!(refused["error"]["code"], "conflict");
    let (ok, rejected) = admin(
        &app,
        &[
            "money",
            "reject",
            id(&zero_review),
            "--note",
            "nothing arrived",
        ],
    )
    .await;
    assert!(ok, "{rejected}");
    assert_eq!(rejected["status"], "rejected");

    let (ok, decided) = admin(&app, &["money", "reviews", "--status", "approved"]).await;
    assert!(ok, "{decided}");
    assert_eq!(decided["data"][0]["id"], id(&review));
}
