//! A delivered eSIM profile.

use sea_orm::entity::prelude::*;

use crate::states::{EsimStatus, Mode};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "esims")]
pub struct Model {
    /// 19-20 digits, starts `89`, Luhn check digit.
    #[sea_orm(primary_key, auto_increment = false)]
    pub iccid: String,
    pub partner_id: String,
    pub mode: Mode,
    pub order_id: String,
    /// The unit that delivered it (unique).
    pub unit_id: String,
    pub plan_id: String,
    /// `released` once delivered.
    pub status: EsimStatus,
    pub smdp_address: String,
    pub matching_id: String,
    /// `LPA:1$<smdp>$<matching id>`.
    pub activation_code: String,
    pub created_at: DateTimeUtc,
    /// The supplier's number of this profile (`esimTranNo`): its usage
    /// query asks by it.
    pub esim_tran_no: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
