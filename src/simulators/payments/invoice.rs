//! An invoice as BTCPay's `InvoiceWatcher` moves it, its payments in BTC at
//! one fixed rate, and the conversions between cents and BTC.

use std::str::FromStr;

use chrono::{DateTime, Utc};
use rust_decimal::{Decimal, RoundingStrategy};

/// USD per BTC of every simulated payment.
pub(super) const RATE: &str = "96414.37";
/// How long a lapsed invoice is still watched for payments (BTCPay's default).
pub(super) const MONITORING_MINUTES: i64 = 1440;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PaymentStatus {
    Processing,
    Settled,
}

#[derive(Debug, Clone)]
pub(super) struct Payment {
    pub(super) id: String,
    /// `BTC-CHAIN` or `BTC-LN`.
    pub(super) method: &'static str,
    /// In BTC.
    pub(super) value: Decimal,
    pub(super) status: PaymentStatus,
    pub(super) received: DateTime<Utc>,
}

#[derive(Debug, Clone)]
pub(super) struct PullPayment {
    pub(super) id: String,
    /// In BTC (a refund at the rate of the payment).
    pub(super) amount: Decimal,
    pub(super) created: DateTime<Utc>,
}

#[derive(Debug, Clone)]
pub(super) struct Invoice {
    pub(super) id: String,
    pub(super) order_id: String,
    pub(super) amount_cents: i64,
    pub(super) status: &'static str,
    pub(super) additional_status: &'static str,
    pub(super) payments: Vec<Payment>,
    pub(super) refunds: Vec<PullPayment>,
    pub(super) created: DateTime<Utc>,
    pub(super) expires_at: DateTime<Utc>,
}

impl Invoice {
    pub(super) fn rate() -> Decimal {
        Decimal::from_str(RATE).unwrap_or(Decimal::ONE)
    }

    pub(super) fn paid_btc(&self) -> Decimal {
        self.payments.iter().map(|p| p.value).sum()
    }

    /// What arrived, in USD cents, rounded as BTCPay rounds `paidAmount`.
    pub(super) fn paid_cents(&self) -> i64 {
        btc_to_cents(self.paid_btc())
    }

    pub(super) fn due_btc(&self) -> Decimal {
        usd_cents_to_btc(self.amount_cents)
    }

    pub(super) fn confirming(&self) -> bool {
        self.payments
            .iter()
            .any(|p| p.status == PaymentStatus::Processing)
    }

    /// `InvoiceWatcher.UpdateInvoice`, for the cases the simulator makes.
    pub(super) fn update(&mut self) {
        let paid = self.paid_cents();
        let has_payment = !self.payments.is_empty();
        let underpaid = paid < self.amount_cents;
        match self.status {
            "New" if !underpaid => {
                self.status = "Processing";
                self.additional_status = if paid > self.amount_cents {
                    "PaidOver"
                } else {
                    "None"
                };
            }
            "New" | "Expired" if has_payment && underpaid => self.additional_status = "PaidPartial",
            "Expired" if !underpaid => self.additional_status = "PaidLate",
            _ => {}
        }
        if self.status == "Processing" && !self.confirming() {
            self.status = "Settled";
        }
    }

    pub(super) fn expire(&mut self) {
        if self.status == "New" {
            self.status = "Expired";
            self.expires_at = self.expires_at.min(Utc::now());
        }
    }

    pub(super) fn pay(&mut self, cents: i64, method: &'static str, confirmed: bool) -> Payment {
        let payment = Payment {
            id: format!("{}-{}", uuid::Uuid::new_v4().simple(), self.payments.len()),
            method,
            value: usd_cents_to_btc(cents),
            status: if confirmed {
                PaymentStatus::Settled
            } else {
                PaymentStatus::Processing
            },
            received: Utc::now(),
        };
        self.payments.push(payment.clone());
        self.update();
        payment
    }
}

pub(super) fn usd_cents_to_btc(cents: i64) -> Decimal {
    (Decimal::from(cents) / Decimal::ONE_HUNDRED / Invoice::rate())
        .round_dp_with_strategy(8, RoundingStrategy::MidpointNearestEven)
}

pub(super) fn btc_to_cents(btc: Decimal) -> i64 {
    let usd =
        (btc * Invoice::rate()).round_dp_with_strategy(2, RoundingStrategy::MidpointNearestEven);
    i64::try_from((usd * Decimal::ONE_HUNDRED).trunc()).unwrap_or(i64::MAX)
}

pub(super) fn btc(value: Decimal) -> String {
    format!("{:.8}", value)
}
