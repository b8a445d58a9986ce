//! What approving a deposit review does to the money.
//!
//! A review is raised when money arrived (or left) in a way the deposit
//! table will not settle by itself; it records the cents in question. An
//! operator approves it (the money moves, once) or rejects it (nothing moves).
//! Approving is allowed only where the movement is unambiguous:
//!
//! | reason | deposit | approval moves | deposit becomes |
//! |---|---|---|---|
//! | `invalid_with_payment` | `pending`, `cancelled` | + amount, `deposit` | `credited` |
//! | `invalid_with_payment`, `paid_after_credit` | `credited` | + amount, `deposit` | (stays) |
//! | `refunded_after_credit` | `credited` | − amount, `chargeback` (may overdraw) | `reversed` |
//! | `zero_settlement` | any | nothing arrived: not approvable | |
//! | `paid_on_closed_account` | any | the account is closed: not approvable | |
//!
//! Anything else (an amount of zero, a deposit already refunded or reversed)
//! is refused, and the operator rejects or resolves the review instead.

pub(crate) use entities::states::{DepositStatus, LedgerKind, ReviewReason, ReviewStatus};

/// The movement an approval writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Approval {
    /// The ledger kind of the movement.
    pub kind: LedgerKind,
    /// Signed cents on the live float.
    pub amount_cents: i64,
    /// Whether the float may go below zero (money already gone).
    pub allow_overdraft: bool,
    /// What happens to the deposit itself.
    pub deposit: DepositEffect,
}

/// What an approval does to the deposit row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DepositEffect {
    /// Unchanged.
    Unchanged,
    /// `pending` or `cancelled` → `credited` with the amount (the deposit's
    /// own credit movement).
    Credit,
    /// `credited` → `reversed`.
    Reverse,
}

/// Why a review cannot be approved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NotApprovable {
    /// Someone decided it already.
    #[error("the review is already {0}")]
    Decided(ReviewStatus),
    /// A zero settlement: there is no amount to credit.
    #[error(
        "nothing arrived, so there is nothing to credit; check the provider, then reject it or move money by hand"
    )]
    NothingArrived,
    /// Money paid to a closed account goes back outside the float.
    #[error("the account is closed; return the money outside the float and reject the review")]
    AccountClosed,
    /// The review records no amount.
    #[error("the review records no amount in question; reject it or move money by hand")]
    NoAmount,
    /// The deposit no longer stands where the approval applies.
    #[error("the deposit is {0}, so approving this review would move money twice or wrongly")]
    DepositMoved(DepositStatus),
}

/// The movement approving a review of `reason` about `amount_cents` makes,
/// given where the review and its deposit stand.
pub(crate) fn approval(
    status: ReviewStatus,
    reason: ReviewReason,
    amount_cents: i64,
    deposit: DepositStatus,
) -> Result<Approval, NotApprovable> {
    use DepositStatus::{Cancelled, Credited, Pending};
    if status != ReviewStatus::Open {
        return Err(NotApprovable::Decided(status));
    }
    let credit = |effect| Approval {
        kind: LedgerKind::Deposit,
        amount_cents,
        allow_overdraft: false,
        deposit: effect,
    };
    let approval = match (reason, deposit) {
        (ReviewReason::ZeroSettlement, _) => return Err(NotApprovable::NothingArrived),
        (ReviewReason::PaidOnClosedAccount, _) => return Err(NotApprovable::AccountClosed),
        (ReviewReason::InvalidWithPayment, Pending | Cancelled) => credit(DepositEffect::Credit),
        (ReviewReason::InvalidWithPayment | ReviewReason::PaidAfterCredit, Credited) => {
            credit(DepositEffect::Unchanged)
        }
        (ReviewReason::RefundedAfterCredit, Credited) => Approval {
            kind: LedgerKind::Chargeback,
            amount_cents: -amount_cents,
            allow_overdraft: true,
            deposit: DepositEffect::Reverse,
        },
        (_, other) => return Err(NotApprovable::DepositMoved(other)),
    };
    if amount_cents <= 0 {
        return Err(NotApprovable::NoAmount);
    }
    Ok(approval)
}

#[cfg(test)]
mod tests {
    use super::*;
    use DepositStatus::*;
    use ReviewReason::*;

    fn open(
        reason: ReviewReason,
        cents: i64,
        deposit: DepositStatus,
    ) -> Result<Approval, NotApprovable> {
        approval(ReviewStatus::Open, reason, cents, deposit)
    }

    #[test]
    fn money_on_an_invalid_invoice_credits_the_deposit_itself() {
        let approval = open(InvalidWithPayment, 40_000, Cancelled).unwrap();
        assert_eq!(approval.amount_cents, 40_000);
        assert_eq!(approval.kind, LedgerKind::Deposit);
        assert_eq!(approval.deposit, DepositEffect::Credit);
        assert!(!approval.allow_overdraft);
    }

    #[test]
    fn money_after_a_credit_is_an_extra_deposit_movement() {
        for reason in [InvalidWithPayment, PaidAfterCredit] {
            let approval = open(reason, 30_000, Credited).unwrap();
            assert_eq!(approval.amount_cents, 30_000);
            assert_eq!(approval.deposit, DepositEffect::Unchanged);
        }
    }

    #[test]
    fn a_refund_after_credit_takes_the_money_back_even_into_overdraft() {
        let approval = open(RefundedAfterCredit, 500, Credited).unwrap();
        assert_eq!(approval.amount_cents, -500);
        assert_eq!(approval.kind, LedgerKind::Chargeback);
        assert!(approval.allow_overdraft);
        assert_eq!(approval.deposit, DepositEffect::Reverse);
    }

    #[test]
    fn nothing_is_approved_twice_nor_without_an_amount() {
        for status in [
            ReviewStatus::Approved,
            ReviewStatus::Rejected,
            ReviewStatus::Resolved,
        ] {
            assert_eq!(
                approval(status, PaidAfterCredit, 100, Credited),
                Err(NotApprovable::Decided(status))
            );
        }
        assert_eq!(
            open(PaidAfterCredit, 0, Credited),
            Err(NotApprovable::NoAmount)
        );
        assert_eq!(
            open(ZeroSettlement, 0, Pending),
            Err(NotApprovable::NothingArrived)
        );
        assert_eq!(
            open(PaidOnClosedAccount, 900, Pending),
            Err(NotApprovable::AccountClosed)
        );
    }

    #[test]
    fn a_deposit_that_moved_on_is_not_moved_again() {
        assert_eq!(
            open(PaidAfterCredit, 100, Reversed),
            Err(NotApprovable::DepositMoved(Reversed))
        );
        assert_eq!(
            open(RefundedAfterCredit, 100, Refunded),
            Err(NotApprovable::DepositMoved(Refunded))
        );
        assert_eq!(
            open(InvalidWithPayment, 100, Refunded),
            Err(NotApprovable::DepositMoved(Refunded))
        );
    }
}
