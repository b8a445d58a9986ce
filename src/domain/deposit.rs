//! The deposit state table: what a crypto deposit does next, given what the
//! payment provider reports about its invoice.
//!
//! The provider is BTCPay Server. Its Greenfield invoice carries a `status`
//! (`New|Processing|Expired|Invalid|Settled`) and an `additionalStatus`
//! (`None|PaidLate|PaidPartial|Marked|Invalid|PaidOver`); how they move is
//! BTCPay's `InvoiceWatcher.UpdateInvoice`. Two facts of that code shape the
//! table: an invoice that lapses is `Expired` for good, even when it is paid
//! in full afterwards (`Expired`/`PaidLate`), so an expired invoice with
//! money on it is never settled by the provider; and a `Processing` invoice
//! whose payments fail to confirm in time becomes `Invalid`.
//!
//! The rule the table keeps: money that arrived is never silently dropped.
//! It is credited once the amount is final (confirmed), or it is raised for
//! an operator's review.
//!
//! | provider (`status`/`additionalStatus`) | received | deposit `pending`/`cancelled` | deposit `credited` |
//! |---|---|---|---|
//! | `New`/`None` | 0 | wait; lapse to `cancelled` once `expires_at` passed | nothing |
//! | `New`/`PaidPartial` | > 0 | wait (the invoice is open) | nothing |
//! | `Processing`/any | any | wait (paid, confirming) | nothing |
//! | `Settled`/any (`None`, `PaidOver`, `PaidPartial`, `PaidLate`, `Marked`) | > 0 | credit what arrived | review `paid_after_credit` if more arrived than was credited |
//! | `Settled`/any | 0 | review `zero_settlement`, stay | nothing |
//! | `Expired`/`None` | 0 | `cancelled` | nothing |
//! | `Expired`/`PaidPartial`, `PaidLate`, `PaidOver`, `Marked` | > 0, a payment still confirming | `cancelled`, wait | nothing |
//! | `Expired`/`PaidPartial`, `PaidLate`, `PaidOver`, `Marked` | > 0, all confirmed | credit what arrived | review `paid_after_credit` if more arrived |
//! | `Invalid`/any | 0 | `cancelled` | nothing |
//! | `Invalid`/any (`Marked` included) | > 0, confirmed or not | `cancelled`, review `invalid_with_payment` | review `invalid_with_payment` |
//!
//! A deposit that is `refunded` never moves again. Refunds do not appear on
//! a Greenfield invoice at all: they are pull payments, announced by the
//! `InvoiceRefund` webhook ([`refund_step`]).

use chrono::{DateTime, Utc};
pub(crate) use entities::states::{DepositStatus, ReviewReason};

/// Greenfield's `InvoiceStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvoiceStatus {
    /// Open; nothing or not enough paid.
    New,
    /// Paid in full, waiting for confirmations.
    Processing,
    /// Lapsed; stays so even if paid afterwards.
    Expired,
    /// Payments failed to confirm in time, or marked invalid by the store.
    Invalid,
    /// Final.
    Settled,
}

impl InvoiceStatus {
    /// Parses Greenfield's spelling; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "New" => Self::New,
            "Processing" => Self::Processing,
            "Expired" => Self::Expired,
            "Invalid" => Self::Invalid,
            "Settled" => Self::Settled,
            _ => return None,
        })
    }
}

/// Greenfield's `InvoiceExceptionStatus` (`additionalStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdditionalStatus {
    None,
    /// Paid after the invoice lapsed.
    PaidLate,
    /// Less than the amount was paid.
    PaidPartial,
    /// The store set the status by hand.
    Marked,
    /// Older servers' spelling of a marked-invalid invoice.
    Invalid,
    /// More than the amount was paid.
    PaidOver,
}

impl AdditionalStatus {
    /// Parses Greenfield's spelling; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "None" => Self::None,
            "PaidLate" => Self::PaidLate,
            "PaidPartial" => Self::PaidPartial,
            "Marked" => Self::Marked,
            "Invalid" => Self::Invalid,
            "PaidOver" => Self::PaidOver,
            _ => return None,
        })
    }
}

/// What the provider reports about an invoice now, read back through its API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvoiceReading {
    pub status: InvoiceStatus,
    pub additional: AdditionalStatus,
    /// Received so far, in US cents (the invoice currency), net of what the
    /// provider no longer accounts (invalid payments).
    pub received_cents: i64,
    /// A payment on the invoice is still waiting for confirmations.
    pub confirming: bool,
}

/// The deposit as the table needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DepositView {
    pub status: DepositStatus,
    pub credited_cents: Option<i64>,
    pub expires_at: Option<DateTime<Utc>>,
}

/// What to do with a deposit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Nothing changes; ask again later.
    Wait,
    /// `pending` → `cancelled` (still claimable).
    Cancel,
    /// `pending`/`cancelled` → `credited` with these cents.
    Credit(i64),
    /// Raise a review about `cents`; with `cancel`, also `pending` → `cancelled`.
    Review {
        reason: ReviewReason,
        cents: i64,
        cancel: bool,
    },
    /// `pending`/`cancelled` → `refunded` (terminal).
    Refund,
    /// Nothing to do, ever again, for this reading.
    Nothing,
}

/// The state table (see the module documentation).
pub(crate) fn step(deposit: DepositView, reading: InvoiceReading, now: DateTime<Utc>) -> Step {
    match deposit.status {
        DepositStatus::Pending | DepositStatus::Cancelled => step_open(deposit, reading, now),
        DepositStatus::Credited => step_credited(deposit, reading),
        DepositStatus::Refunded | DepositStatus::Reversed => Step::Nothing,
    }
}

fn step_open(deposit: DepositView, reading: InvoiceReading, now: DateTime<Utc>) -> Step {
    let received = reading.received_cents.max(0);
    let pending = deposit.status == DepositStatus::Pending;
    match reading.status {
        InvoiceStatus::New => {
            let lapsed = deposit.expires_at.is_some_and(|at| at <= now);
            if pending && lapsed && received == 0 {
                Step::Cancel
            } else {
                Step::Wait
            }
        }
        InvoiceStatus::Processing => Step::Wait,
        InvoiceStatus::Settled if received > 0 => Step::Credit(received),
        InvoiceStatus::Settled => Step::Review {
            reason: ReviewReason::ZeroSettlement,
            cents: 0,
            cancel: false,
        },
        InvoiceStatus::Expired if received > 0 && !reading.confirming => Step::Credit(received),
        // Invalid payments are often the ones that never confirmed: what the
        // provider still counts as received is raised, confirmed or not.
        InvoiceStatus::Expired | InvoiceStatus::Invalid
            if received == 0
                || (reading.confirming && reading.status == InvoiceStatus::Expired) =>
        {
            if pending {
                Step::Cancel
            } else {
                Step::Wait
            }
        }
        InvoiceStatus::Expired => Step::Wait,
        InvoiceStatus::Invalid => Step::Review {
            reason: ReviewReason::InvalidWithPayment,
            cents: received,
            cancel: pending,
        },
    }
}

fn step_credited(deposit: DepositView, reading: InvoiceReading) -> Step {
    let received = reading.received_cents.max(0);
    let credited = deposit.credited_cents.unwrap_or(0);
    match reading.status {
        InvoiceStatus::Invalid if received > 0 => Step::Review {
            reason: ReviewReason::InvalidWithPayment,
            cents: received,
            cancel: false,
        },
        InvoiceStatus::Settled | InvoiceStatus::Expired
            if received > credited && !reading.confirming =>
        {
            Step::Review {
                reason: ReviewReason::PaidAfterCredit,
                cents: received - credited,
                cancel: false,
            }
        }
        _ => Step::Nothing,
    }
}

/// A refund (a pull payment the store created for the invoice) confirmed
/// through the provider's API.
pub(crate) fn refund_step(deposit: DepositStatus, refund_cents: i64) -> Step {
    match deposit {
        DepositStatus::Pending | DepositStatus::Cancelled => Step::Refund,
        DepositStatus::Credited => Step::Review {
            reason: ReviewReason::RefundedAfterCredit,
            cents: refund_cents,
            cancel: false,
        },
        DepositStatus::Refunded | DepositStatus::Reversed => Step::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AdditionalStatus as A;
    use InvoiceStatus as S;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-24T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    fn open(status: DepositStatus, expired: bool) -> DepositView {
        let offset = chrono::Duration::minutes(if expired { -1 } else { 30 });
        DepositView {
            status,
            credited_cents: None,
            expires_at: Some(now() + offset),
        }
    }

    fn credited(cents: i64) -> DepositView {
        DepositView {
            status: DepositStatus::Credited,
            credited_cents: Some(cents),
            expires_at: Some(now()),
        }
    }

    fn reading(status: S, additional: A, received: i64, confirming: bool) -> InvoiceReading {
        InvoiceReading {
            status,
            additional,
            received_cents: received,
            confirming,
        }
    }

    fn pending() -> DepositView {
        open(DepositStatus::Pending, false)
    }

    fn review(reason: ReviewReason, cents: i64, cancel: bool) -> Step {
        Step::Review {
            reason,
            cents,
            cancel,
        }
    }

    #[test]
    fn new_none_waits_until_it_lapses() {
        let r = reading(S::New, A::None, 0, false);
        assert_eq!(step(pending(), r, now()), Step::Wait);
        assert_eq!(
            step(open(DepositStatus::Pending, true), r, now()),
            Step::Cancel
        );
    }

    #[test]
    fn new_paid_partial_waits_even_past_expiry() {
        let r = reading(S::New, A::PaidPartial, 12_000, false);
        assert_eq!(step(pending(), r, now()), Step::Wait);
        assert_eq!(
            step(open(DepositStatus::Pending, true), r, now()),
            Step::Wait
        );
    }

    #[test]
    fn processing_waits_whatever_its_additional_status() {
        for additional in [A::None, A::PaidOver, A::PaidPartial, A::PaidLate, A::Marked] {
            let r = reading(S::Processing, additional, 50_000, true);
            assert_eq!(step(pending(), r, now()), Step::Wait, "{additional:?}");
        }
    }

    #[test]
    fn settled_none_credits_what_arrived() {
        let r = reading(S::Settled, A::None, 50_000, false);
        assert_eq!(step(pending(), r, now()), Step::Credit(50_000));
    }

    #[test]
    fn settled_paid_over_credits_the_overpayment_in_full() {
        let r = reading(S::Settled, A::PaidOver, 51_234, false);
        assert_eq!(step(pending(), r, now()), Step::Credit(51_234));
    }

    #[test]
    fn settled_paid_partial_credits_the_underpayment() {
        // A payment tolerance lets the provider settle an underpaid invoice.
        let r = reading(S::Settled, A::PaidPartial, 49_800, false);
        assert_eq!(step(pending(), r, now()), Step::Credit(49_800));
    }

    #[test]
    fn settled_marked_credits_what_arrived_or_asks_a_person() {
        let r = reading(S::Settled, A::Marked, 20_000, false);
        assert_eq!(step(pending(), r, now()), Step::Credit(20_000));
        let marked_unpaid = reading(S::Settled, A::Marked, 0, false);
        assert_eq!(
            step(pending(), marked_unpaid, now()),
            review(ReviewReason::ZeroSettlement, 0, false)
        );
    }

    #[test]
    fn settled_with_nothing_received_is_a_zero_settlement_review() {
        let r = reading(S::Settled, A::None, 0, false);
        assert_eq!(
            step(pending(), r, now()),
            review(ReviewReason::ZeroSettlement, 0, false)
        );
    }

    #[test]
    fn settled_paid_late_credits_a_cancelled_deposit() {
        let r = reading(S::Settled, A::PaidLate, 50_000, false);
        assert_eq!(
            step(open(DepositStatus::Cancelled, true), r, now()),
            Step::Credit(50_000)
        );
    }

    #[test]
    fn expired_none_cancels() {
        let r = reading(S::Expired, A::None, 0, false);
        assert_eq!(step(pending(), r, now()), Step::Cancel);
        assert_eq!(
            step(open(DepositStatus::Cancelled, true), r, now()),
            Step::Wait
        );
    }

    #[test]
    fn expired_paid_partial_cancels_while_confirming_then_credits_what_arrived() {
        let confirming = reading(S::Expired, A::PaidPartial, 30_000, true);
        assert_eq!(step(pending(), confirming, now()), Step::Cancel);
        let confirmed = reading(S::Expired, A::PaidPartial, 30_000, false);
        assert_eq!(step(pending(), confirmed, now()), Step::Credit(30_000));
        assert_eq!(
            step(open(DepositStatus::Cancelled, true), confirmed, now()),
            Step::Credit(30_000)
        );
    }

    #[test]
    fn expired_paid_late_credits_once_confirmed() {
        let confirming = reading(S::Expired, A::PaidLate, 50_000, true);
        assert_eq!(
            step(open(DepositStatus::Cancelled, true), confirming, now()),
            Step::Wait
        );
        let confirmed = reading(S::Expired, A::PaidLate, 50_000, false);
        assert_eq!(
            step(open(DepositStatus::Cancelled, true), confirmed, now()),
            Step::Credit(50_000)
        );
    }

    #[test]
    fn expired_paid_over_and_marked_credit_what_arrived() {
        for additional in [A::PaidOver, A::Marked] {
            let r = reading(S::Expired, additional, 61_000, false);
            assert_eq!(step(pending(), r, now()), Step::Credit(61_000));
        }
    }

    #[test]
    fn invalid_without_money_cancels() {
        for additional in [A::None, A::Marked, A::Invalid] {
            let r = reading(S::Invalid, additional, 0, false);
            assert_eq!(step(pending(), r, now()), Step::Cancel, "{additional:?}");
        }
    }

    #[test]
    fn invalid_with_money_cancels_and_asks_a_person() {
        for (additional, confirming) in [
            (A::None, true),
            (A::Marked, false),
            (A::Invalid, false),
            (A::PaidPartial, true),
            (A::PaidOver, false),
        ] {
            let r = reading(S::Invalid, additional, 40_000, confirming);
            assert_eq!(
                step(pending(), r, now()),
                review(ReviewReason::InvalidWithPayment, 40_000, true),
                "{additional:?}"
            );
        }
    }

    #[test]
    fn a_credited_deposit_reports_money_that_came_after_the_credit() {
        let more = reading(S::Expired, A::PaidLate, 80_000, false);
        assert_eq!(
            step(credited(30_000), more, now()),
            review(ReviewReason::PaidAfterCredit, 50_000, false)
        );
        let same = reading(S::Settled, A::None, 30_000, false);
        assert_eq!(step(credited(30_000), same, now()), Step::Nothing);
        let still_confirming = reading(S::Expired, A::PaidLate, 80_000, true);
        assert_eq!(
            step(credited(30_000), still_confirming, now()),
            Step::Nothing
        );
    }

    #[test]
    fn a_credited_deposit_invalidated_afterwards_asks_a_person() {
        let r = reading(S::Invalid, A::Marked, 30_000, false);
        assert_eq!(
            step(credited(30_000), r, now()),
            review(ReviewReason::InvalidWithPayment, 30_000, false)
        );
    }

    #[test]
    fn refunded_and_reversed_deposits_never_move() {
        let r = reading(S::Settled, A::None, 50_000, false);
        for status in [DepositStatus::Refunded, DepositStatus::Reversed] {
            assert_eq!(step(open(status, false), r, now()), Step::Nothing);
        }
    }

    #[test]
    fn refunds_end_an_open_deposit_and_ask_a_person_after_a_credit() {
        assert_eq!(refund_step(DepositStatus::Pending, 500), Step::Refund);
        assert_eq!(refund_step(DepositStatus::Cancelled, 500), Step::Refund);
        assert_eq!(
            refund_step(DepositStatus::Credited, 500),
            review(ReviewReason::RefundedAfterCredit, 500, false)
        );
        assert_eq!(refund_step(DepositStatus::Refunded, 500), Step::Nothing);
    }

    #[test]
    fn every_greenfield_spelling_parses() {
        for s in ["New", "Processing", "Expired", "Invalid", "Settled"] {
            assert!(InvoiceStatus::parse(s).is_some(), "{s}");
        }
        for a in [
            "None",
            "PaidLate",
            "PaidPartial",
            "Marked",
            "Invalid",
            "PaidOver",
        ] {
            assert!(AdditionalStatus::parse(a).is_some(), "{a}");
        }
        assert_eq!(InvoiceStatus::parse("Complete"), None);
        assert_eq!(AdditionalStatus::parse("Refunded"), None);
    }
}
