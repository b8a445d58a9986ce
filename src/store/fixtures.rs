//! Rows and databases the tests of several modules start from: a migrated
//! SQLite file with a funded partner, a supplier order, a unit's profile, an
//! order's status read back. Built only for tests.
#![cfg(test)]

use chrono::Utc;
use entities::{esim, order, supplier_order};
use sea_orm::EntityTrait;

use super::Db;
use crate::domain::{
    partner::Mode,
    states::{EsimStatus, OrderStatus, SupplierOrderStatus},
};

/// A fresh, migrated SQLite file opened as the service opens it (two pooled
/// connections), with a gold partner holding 10,000 cents in its sandbox
/// float: the folder (it goes with the file), the database, the partner's id.
pub(crate) async fn funded_partner(name: &str) -> (tempfile::TempDir, Db, String) {
    let (dir, db) = super::tests::sqlite_file_db(name, 2).await;
    super::migrate(&db)
        .await
        .expect("a fresh file takes the migrations");
    let partner_id = super::partners::gold_partner(&db, "fixture", 10_000).await;
    (dir, db, partner_id)
}

/// A sandbox supplier order `id` for `units` units of `pl_x`, being placed.
pub(crate) fn supplier_row(id: &str, units: i32) -> supplier_order::Model {
    supplier_order::Model {
        id: id.into(),
        mode: Mode::Sandbox,
        package_code: "PKG".into(),
        unit_count: units,
        order_no: None,
        status: SupplierOrderStatus::Placing,
        attempts: 0,
        last_error: None,
        node_id: "n1".into(),
        created_at: Utc::now(),
        updated_at: Utc::now(),
        supplier: "sandbox".into(),
        plan_id: Some("pl_x".into()),
        successor_id: None,
        unit_cost_cents: None,
        calls_sent: 0,
    }
}

/// The status of order `id` as stored.
pub(crate) async fn order_status(db: &Db, id: &str) -> OrderStatus {
    order::Entity::find_by_id(id.to_owned())
        .one(db)
        .await
        .expect("the order is readable")
        .expect("the order exists")
        .status
}

/// The profile of unit `n` of `order`; its ICCID names the order, so the
/// profiles of two orders never collide.
pub(crate) fn profile(order: &order::Model, n: i32) -> esim::Model {
    esim::Model {
        iccid: format!("8900{n}-{}", order.id),
        partner_id: order.partner_id.clone(),
        mode: order.mode,
        order_id: order.id.clone(),
        unit_id: super::orders::unit_id(&order.id, n),
        plan_id: order.plan_id.clone(),
        status: EsimStatus::Released,
        smdp_address: "smdp.example".into(),
        matching_id: format!("M-{n}"),
        activation_code: format!("LPA:1$smdp.example$M-{n}"),
        created_at: Utc::now(),
        esim_tran_no: Some(format!("T{n}")),
    }
}
