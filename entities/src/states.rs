//! The closed vocabularies stored in enum-like columns: modes, statuses and
//! kinds.
//!
//! Each is a Rust enum stored as its short snake_case word through sea-orm's
//! `DeriveActiveEnum`, so one text column serves SQLite and PostgreSQL and a
//! row holding any other word fails to load (`DbErr::Type`) instead of being
//! read as a default. The same word is the enum's JSON form and its OpenAPI
//! schema, so the partner API, the database and the code share one spelling.
//!
//! Their meaning (which transitions are allowed, what settles an order) lives
//! in the main crate's `domain`, which re-exports these types.

use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// What every vocabulary offers, for code generic over them (parsing a
/// query parameter, listing the allowed words).
pub trait Vocabulary: Copy + Eq + 'static {
    /// Every value, in declaration order.
    const ALL: &'static [Self];
    /// The stored and published word.
    fn as_str(self) -> &'static str;
    /// The value a word names; `None` for any other word.
    fn parse(text: &str) -> Option<Self>;
}

/// Declares a stored vocabulary: the enum with its sea-orm, serde and OpenAPI
/// derives, plus `ALL`, `as_str` and a strict `parse`.
macro_rules! vocabulary {
    (
        $(#[$meta:meta])*
        $name:ident {
            $( $(#[$variant_meta:meta])* $variant:ident = $text:tt ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord,
            EnumIter, DeriveActiveEnum, Serialize, Deserialize, utoipa::ToSchema,
        )]
        #[sea_orm(rs_type = "String", db_type = "String(StringLen::None)")]
        pub enum $name {
            $(
                $(#[$variant_meta])*
                #[sea_orm(string_value = $text)]
                #[serde(rename = $text)]
                $variant,
            )+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The stored and published word.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The value a word names; `None` for any other word (no default).
            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl Vocabulary for $name {
            const ALL: &'static [Self] = $name::ALL;

            fn as_str(self) -> &'static str {
                $name::as_str(self)
            }

            fn parse(text: &str) -> Option<Self> {
                $name::parse(text)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

vocabulary! {
    /// Which float a key spends and which supplier serves it: decided by the
    /// key alone.
    Mode {
        /// Real money, the real supplier.
        Live = "live",
        /// A separate float and the sandbox supplier; nothing is billed.
        Sandbox = "sandbox",
    }
}

vocabulary! {
    /// Lifecycle of a partner account.
    AccountStatus {
        /// Integrating: only sandbox keys are useful.
        Sandbox = "sandbox",
        /// Applied for live, not yet approved.
        Pending = "pending",
        /// Trading.
        Live = "live",
        /// Live keys refused, balance frozen; sandbox keys keep working.
        Suspended = "suspended",
        /// Terminal: every key refused.
        Closed = "closed",
    }
}

vocabulary! {
    /// Where an order stands. It is `processing` until every unit is
    /// delivered or refunded.
    OrderStatus {
        /// Accepted and paid; units are being provisioned.
        Processing = "processing",
        /// Every unit delivered.
        Completed = "completed",
        /// Some units delivered, the others refunded.
        PartiallyCompleted = "partially_completed",
        /// No unit delivered; everything refunded.
        Failed = "failed",
    }
}

vocabulary! {
    /// Where one unit (one eSIM) of an order stands.
    UnitStatus {
        /// Not yet delivered nor refunded.
        Pending = "pending",
        /// Its eSIM was delivered.
        Delivered = "delivered",
        /// Given up on; its price went back to the float.
        Refunded = "refunded",
    }
}

vocabulary! {
    /// Why undelivered units of an order were refunded.
    FailureCode {
        /// The supplier could not provision them.
        SupplierError = "supplier_error",
        /// The order could not be provisioned for a reason of ours.
        InternalError = "internal_error",
    }
}

vocabulary! {
    /// Where a deposit stands in the books.
    DepositStatus {
        /// Invoice open: waiting for payment or confirmations.
        Pending = "pending",
        /// The float was credited.
        Credited = "credited",
        /// The invoice expired or was invalidated before payment; a late
        /// payment can still credit it.
        Cancelled = "cancelled",
        /// The payment was refunded to the payer before any credit.
        Refunded = "refunded",
        /// A credit was taken back.
        Reversed = "reversed",
    }
}

vocabulary! {
    /// What moved money on the float.
    LedgerKind {
        /// A deposit credited.
        Deposit = "deposit",
        /// An order paid (negative).
        Purchase = "purchase",
        /// Undelivered units paid back.
        Refund = "refund",
        /// An operator's correction, either sign.
        Adjustment = "adjustment",
        /// Money paid out to the partner (negative).
        Payout = "payout",
        /// A payment taken back by the payer (negative).
        Chargeback = "chargeback",
    }
}

vocabulary! {
    /// Where an order placed with the supplier stands.
    SupplierOrderStatus {
        /// Written down; the supplier has not answered yet.
        Placing = "placing",
        /// The supplier took it and gave its order number.
        Placed = "placed",
        /// Its profiles were read back and delivered.
        Allocated = "allocated",
        /// The supplier refused it for good.
        Failed = "failed",
    }
}

vocabulary! {
    /// Where a delivered eSIM profile stands.
    EsimStatus {
        /// Delivered to the partner, ready to install.
        Released = "released",
    }
}

vocabulary! {
    /// Why a person must look at a deposit.
    ReviewReason {
        /// The provider settled the invoice with nothing received.
        ZeroSettlement = "zero_settlement",
        /// Money arrived on an invoice declared invalid.
        InvalidWithPayment = "invalid_with_payment",
        /// More arrived after the credit than was credited.
        PaidAfterCredit = "paid_after_credit",
        /// A refund was created for a deposit already credited.
        RefundedAfterCredit = "refunded_after_credit",
        /// Money arrived for an account that is closed.
        PaidOnClosedAccount = "paid_on_closed_account",
    }
}

vocabulary! {
    /// Whether a review still waits for an operator.
    ReviewStatus {
        /// Waiting for an operator.
        Open = "open",
        /// An operator closed it with a note, moving no money.
        Resolved = "resolved",
        /// An operator approved it: the amount in question moved on the
        /// live float (one ledger row).
        Approved = "approved",
        /// An operator declined it, moving no money.
        Rejected = "rejected",
    }
}

vocabulary! {
    /// What an operator may do. Each role may do everything the one before
    /// it may (declaration order is privilege order).
    OperatorRole {
        /// Every read: partners, orders, deposits, reviews, actors,
        /// admission, metrics, the audit trail.
        Viewer = "viewer",
        /// Plus keys (issue, rotate, revoke, allowlists), partners and
        /// their status, sandbox floats.
        Support = "support",
        /// Plus money: movements, wire deposits, review decisions,
        /// approvals, pricing of a partner.
        Finance = "finance",
        /// Plus operators, the catalogue and fault injection.
        Admin = "admin",
    }
}

vocabulary! {
    /// What a held money movement is.
    ApprovalKind {
        /// An adjustment, payout or chargeback on the live float.
        Movement = "movement",
        /// A wire transfer to record as a credited deposit.
        WireDeposit = "wire_deposit",
        /// The approval of a deposit review, moving its amount.
        Review = "review",
    }
}

vocabulary! {
    /// Where a held money movement stands.
    ApprovalStatus {
        /// Waiting for a second operator; nothing has moved.
        PendingApproval = "pending_approval",
        /// A second operator approved it and the money moved, once.
        Approved = "approved",
        /// A second operator (or its requester) declined it; nothing moved.
        Rejected = "rejected",
        /// Nobody decided within its time; nothing moved.
        Lapsed = "lapsed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_parses_back_to_its_value_and_nothing_else_parses() {
        for status in OrderStatus::ALL {
            assert_eq!(OrderStatus::parse(status.as_str()), Some(*status));
            assert_eq!(status.to_value(), status.as_str());
        }
        assert_eq!(OrderStatus::parse("Processing"), None);
        assert_eq!(Mode::parse(""), None);
        assert_eq!(LedgerKind::ALL.len(), 6);
    }

    #[test]
    fn a_stored_word_outside_the_vocabulary_is_an_error_not_a_default() {
        let error = Mode::try_from_value(&"test".to_owned()).unwrap_err();
        assert!(error.to_string().contains("test"), "{error}");
    }

    #[test]
    fn the_json_form_is_the_stored_word() {
        let json = serde_json::to_string(&OrderStatus::PartiallyCompleted).unwrap();
        assert_eq!(json, "\"partially_completed\"");
        let back: UnitStatus = serde_json::from_str("\"refunded\"").unwrap();
        assert_eq!(back, UnitStatus::Refunded);
    }
}
