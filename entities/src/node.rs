//! A node that provisions orders, and when it last said it was alive.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "nodes")]
pub struct Model {
    /// The node's id (`node.id`), written into the claims it holds.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    /// When its current incarnation started.
    pub started_at: DateTimeUtc,
    /// Its last heartbeat; a node quiet for longer than the liveness timeout
    /// is taken for dead and its claims are taken over.
    pub heartbeat_at: DateTimeUtc,
    /// Set when it stopped cleanly (its claims are free at once).
    pub stopped_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
