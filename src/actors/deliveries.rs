//! The single writer of delivered profiles. Provisioning tasks hand it one
//! profile each; it stores every profile queued behind the one in progress,
//! and settles their orders, in one transaction (on a SQLite file, a write
//! of the file's inline connection, committed with the other order-path
//! writes queued meanwhile: [`crate::store::inline_write`]).

use std::{convert::Infallible, sync::Arc};

use entities::esim;

use crate::{
    domain::time,
    store::{self, Db, inline_write::InlineWriter, orders::Delivery},
};

/// One profile waiting for the delivery writer, with its order's quantity.
type Queued = (
    Delivery,
    tokio::sync::oneshot::Sender<Result<bool, sea_orm::DbErr>>,
);

/// Deliveries stored in one transaction at most.
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
                db,
            };
            // Waits for one profile and takes every one queued behind it.
            let mut batch = Vec::with_capacity(DELIVERY_BATCH);
            while incoming.recv_many(&mut batch, DELIVERY_BATCH).await > 0 {
                write_deliveries(&writer, std::mem::take(&mut batch)).await;
            }
        });
        Self { queue }
    }

    /// Stores one profile of an order of `quantity` units (and settles the
    /// order if that was its last unit). `Ok(false)`: the unit was already
    /// settled, nothing written.
    pub(crate) async fn deliver(
        &self,
        profile: esim::Model,
        quantity: i32,
    ) -> Result<bool, sea_orm::DbErr> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        self.queue
            .send((Delivery { profile, quantity }, answer))
            .await
            .map_err(|_| sea_orm::DbErr::Custom("the delivery writer stopped".into()))?;
        answered
            .await
            .map_err(|_| sea_orm::DbErr::Custom("the delivery writer stopped".into()))?
    }
}

/// What the writer task writes through.
struct Writer {
    /// The database (the pool).
    db: Db,
    /// On a SQLite file, the file's inline connection
    /// ([`store::inline_write`]).
    inline: Option<InlineWriter>,
}

async fn write_deliveries(writer: &Writer, batch: Vec<Queued>) {
    let (deliveries, answers): (Vec<Delivery>, Vec<_>) = batch.into_iter().unzip();
    // Shared, not copied: the write may run on whichever writer takes the turn.
    let deliveries = Arc::new(deliveries);
    match store_deliveries(writer, &deliveries).await {
        Ok(results) => {
            for (answer, result) in answers.into_iter().zip(results) {
                let _ = answer.send(Ok(result));
            }
        }
        Err(err) if answers.len() > 1 => {
            // One bad row must not fail the others: store them one by one.
            tracing::warn!(size = answers.len(), error = %err, "batched delivery failed; storing one by one");
            for (delivery, answer) in deliveries.iter().zip(answers) {
                let result = store_deliveries(writer, &Arc::new(vec![delivery.clone()]))
                    .await
                    .map(|r| r.first().copied().unwrap_or(false));
                let _ = answer.send(result);
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
            let txn = store::begin_write(&writer.db).await?;
            let done = store::orders::deliver_and_settle(&txn, deliveries, now).await?;
            txn.commit().await?;
            done
        }
    };
    for (order_id, order) in settled {
        crate::metrics::order_settled(&order, now);
        tracing::info!(order_id, status = order.status.as_str(), "order settled");
    }
    Ok(delivered)
}
