//! A deposit: a crypto invoice opened by the partner, or a wire transfer
//! recorded by an operator.

use sea_orm::entity::prelude::*;

use crate::states::DepositStatus;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "deposits")]
pub struct Model {
    /// `dep_` id; also the provider invoice's order id.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub partner_id: String,
    /// `pending`, `credited`, `cancelled`, `refunded`, `reversed`.
    pub status: DepositStatus,
    /// `crypto` or `wire`.
    pub method: String,
    pub requested_cents: i64,
    /// What arrived; null until credited.
    pub credited_cents: Option<i64>,
    /// The provider's invoice id (crypto) or the bank-statement text (wire); unique per partner.
    pub reference: Option<String>,
    /// The provider's invoice id (crypto), known from creation; `reference`
    /// takes it once the payment is confirmed.
    pub provider_invoice_id: Option<String>,
    pub ledger_entry_id: Option<String>,
    pub payment_url: Option<String>,
    pub expires_at: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
    pub credited_at: Option<DateTimeUtc>,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
