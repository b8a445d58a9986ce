//! The single writer of delivered profiles. Provisioning tasks hand it the
//! profiles one supplier order brought for one order's units, together; it
//! stores every profile queued behind the one in progress, and settles their
//! orders, in one transaction (on a SQLite file, a write of the file's inline
//! connection, committed with the other order-path writes queued meanwhile:
//! [`crate::store::inline_write`]).

use std::{convert::Infallible, sync::Arc};

use entities::esim;

use crate::{
    domain::time,
    store::{self, Db, inline_write::InlineWriter, orders::Delivery},
};

/// The profiles of one order's units waiting for the delivery writer
/// together, each with its order's quantity, and where to answer, per
/// profile, whether it was stored.
type Queued = (
    Vec<Delivery>,
    tokio::sync::oneshot::Sender<Result<Vec<bool>, sea_orm::DbErr>>,
);

/// Deliveries a transaction takes before it stops taking more queued groups
/// (a group is never split, so one can pass it by at most 49, an order's
/// largest quantity less one).
const DELIVERY_BATCH: usize = 256;

/// The single writer of delivered profiles: it stores every profile queued
/// behind the one in progress, and settles their orders, in one transaction,
/// so provisioning does not compete with order acceptance for the database's
/// writer one fsync per unit.
#[derive(Clone)]
pub(crate) struct DeliveryWriter {
    queue: tokio::sync::mpsc::Sender<Queued>,
}

impl DeliveryWriter {
    /// Starts the writer task; it ends when every handle is dropped.
    pub(crate) fn start(db: Db) -> Self {
        let (queue, mut incoming) = tokio::sync::mpsc::channel::<Queued>(4096);
        tokio::spawn(async move {
            let writer = Writer {
                inline: super::inline_writer(&db, "deliveries"),
                db: store::WriterDb::new(&db, 1),
            };
            // Waits for one group and takes every one queued behind it.
            while let Some(first) = incoming.recv().await {
                let mut taken = first.0.len();
                let mut batch = vec![first];
                while taken < DELIVERY_BATCH {
                    let Ok(next) = incoming.try_recv() else { break };
                    taken += next.0.len();
                    batch.push(next);
                }
                write_deliveries(&writer, batch).await;
            }
        });
        Self { queue }
    }

    /// Stores the profiles of units of one order of `quantity` units, in one
    /// transaction (and settles the order if they were its last units): an
    /// order whose every unit is delivered here settles without its units
    /// being counted. Per profile, `false`: its unit was already settled,
    /// nothing written.
    pub(crate) async fn deliver(
        &self,
        profiles: Vec<esim::Model>,
        quantity: i32,
    ) -> Result<Vec<bool>, sea_orm::DbErr> {
        let deliveries = profiles
            .into_iter()
            .map(|profile| Delivery { profile, quantity })
            .collect();
        let (answer, answered) = tokio::sync::oneshot::channel();
        self.queue
            .send((deliveries, answer))
            .await
            .map_err(|_| sea_orm::DbErr::Custom("the delivery writer stopped".into()))?;
        answered
            .await
            .map_err(|_| sea_orm::DbErr::Custom("the delivery writer stopped".into()))?
    }
}

/// What the writer task writes through.
struct Writer {
    /// The database: on PostgreSQL a connection of the writer's own
    /// ([`store::kept`]), else the pool.
    db: store::WriterDb,
    /// On a SQLite file, the file's inline connection
    /// ([`store::inline_write`]).
    inline: Option<InlineWriter>,
}

async fn write_deliveries(writer: &Writer, batch: Vec<Queued>) {
    let sizes: Vec<usize> = batch.iter().map(|(group, _)| group.len()).collect();
    let (groups, answers): (Vec<Vec<Delivery>>, Vec<_>) = batch.into_iter().unzip();
    // Shared, not copied: the write may run on whichever writer takes the turn.
    let deliveries: Arc<Vec<Delivery>> = Arc::new(groups.into_iter().flatten().collect());
    match store_deliveries(writer, &deliveries).await {
        Ok(results) => {
            let mut results = results.into_iter();
            for (answer, size) in answers.into_iter().zip(sizes) {
                let _ = answer.send(Ok(results.by_ref().take(size).collect()));
            }
        }
        Err(err) if deliveries.len() > 1 => {
            // One bad row must not fail the others: store them one by one. A
            // group answers as a whole: if one of its profiles is not stored,
            // its pass leaves the group's units to a later pass, which finds
            // those stored here settled and reads only the others back.
            tracing::warn!(size = deliveries.len(), error = %err, "batched delivery failed; storing one by one");
            let mut one_by_one = deliveries.iter();
            for (answer, size) in answers.into_iter().zip(sizes) {
                let mut results = Vec::with_capacity(size);
                for delivery in one_by_one.by_ref().take(size) {
                    let single = Arc::new(vec![delivery.clone()]);
                    results.push(
                        store_deliveries(writer, &single)
                            .await
                            .map(|r| r.first().copied().unwrap_or(false)),
                    );
                }
                let _ = answer.send(results.into_iter().collect());
            }
        }
        Err(err) => {
            for answer in answers {
                let _ = answer.send(Err(err.clone()));
            }
        }
    }
}

/// Stores the profiles and settles their orders in one transaction: inline
/// on a SQLite file, else (or if that failed) through the pool.
async fn store_deliveries(
    writer: &Writer,
    deliveries: &Arc<Vec<Delivery>>,
) -> Result<Vec<bool>, sea_orm::DbErr> {
    let now = time::now();
    let shared = Arc::clone(deliveries);
    let inline = super::write_inline(writer.inline.as_ref(), move |connection| {
        store::orders::deliver_and_settle_inline::<Infallible>(connection, &shared, now)
    })
    .await;
    let (delivered, settled) = match inline {
        Some(Ok(done)) => done,
        Some(Err(never)) => match never {},
        None => {
            let txn = writer.db.begin().await?;
            let done = store::orders::deliver_and_settle(&txn, deliveries, now).await?;
            txn.commit().await?;
            done
        }
    };
    for (order_id, order) in settled {
        super::order_settled(&order_id, &order, now);
    }
    Ok(delivered)
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use entities::order;

    use super::*;
    use crate::{
        domain::states::OrderStatus,
        store::{
            fixtures::{funded_partner, order_status, profile, supplier_row},
            orders::{NewOrder, PartnerBatch, accept_batch, unit_id},
        },
    };

    /// Orders `keys` of two units each for 1,000 cents, accepted, and one
    /// supplier order carrying all their units.
    async fn two_unit_orders(db: &Db, partner_id: &str, keys: &[&str]) -> Vec<order::Model> {
        let orders: Vec<order::Model> = keys
            .iter()
            .map(|key| order::Model {
                quantity: 2,
                unit_price_cents: 500,
                list_unit_cents: 500,
                ..crate::domain::order::fixtures::accepted(
                    &format!("ord_{key}"),
                    partner_id,
                    key,
                    1_000,
                )
            })
            .collect();
        let batch = PartnerBatch {
            partner_id: partner_id.into(),
            orders: orders
                .iter()
                .map(|order| NewOrder {
                    order: Arc::new(order.clone()),
                    fingerprint: "f".into(),
                })
                .collect(),
            refusals: Vec::new(),
        };
        accept_batch(db, &batch, Utc::now()).await.unwrap();
        let units: Vec<String> = orders
            .iter()
            .flat_map(|order| (1..=2).map(|n| unit_id(&order.id, n)))
            .collect();
        let row = supplier_row("S1", units.len() as i32);
        assert!(store::supplier_orders::open(db, row, &units).await.unwrap());
        orders
    }

    /// Groups queued together are each answered for their own profiles,
    /// whether they share a transaction or not: an order whose units all
    /// come in one group completes; a profile that cannot be stored (its
    /// ICCID another unit's) fails its own group only, and leaves its unit
    /// pending for a later delivery.
    #[tokio::test]
    async fn each_group_is_answered_for_itself_and_a_whole_order_completes() {
        let (_dir, db, partner_id) = funded_partner("deliveries.db").await;
        let orders = two_unit_orders(&db, &partner_id, &["whole", "split"]).await;
        let (whole, split) = (&orders[0], &orders[1]);
        let writer = DeliveryWriter::start(db.clone());
        let colliding = esim::Model {
            iccid: profile(whole, 1).iccid,
            ..profile(split, 2)
        };

        let (both, one, bad) = tokio::join!(
            writer.deliver(vec![profile(whole, 1), profile(whole, 2)], 2),
            writer.deliver(vec![profile(split, 1)], 2),
            writer.deliver(vec![colliding], 2),
        );

        assert_eq!(both.unwrap(), [true, true]);
        assert_eq!(one.unwrap(), [true]);
        assert!(bad.is_err(), "{bad:?}");
        assert_eq!(order_status(&db, &whole.id).await, OrderStatus::Completed);
        assert_eq!(order_status(&db, &split.id).await, OrderStatus::Processing);

        let last = writer.deliver(vec![profile(split, 2)], 2).await;
        assert_eq!(last.unwrap(), [true]);
        assert_eq!(order_status(&db, &split.id).await, OrderStatus::Completed);
        let again = writer.deliver(vec![profile(whole, 2)], 2).await;
        assert_eq!(again.unwrap(), [false], "a unit settles once");
    }
}
