//! Background work repeated at a fixed period until shutdown.

use std::{future::Future, time::Duration};

use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

/// Runs `pass` at once and then every `period` until `stop`. A pass that
/// overruns delays the next one instead of being followed by a burst; a pass
/// under way finishes before `stop` is noticed.
pub(crate) async fn every<F, Fut>(period: Duration, stop: &CancellationToken, mut pass: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => pass().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Arc,
        atomic::{AtomicU32, Ordering},
    };

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn passes_run_at_once_then_every_period_until_stopped() {
        let stop = CancellationToken::new();
        let passes = Arc::new(AtomicU32::new(0));
        let task = tokio::spawn({
            let (stop, passes) = (stop.clone(), passes.clone());
            async move {
                every(Duration::from_secs(10), &stop, || {
                    passes.fetch_add(1, Ordering::Relaxed);
                    async {}
                })
                .await
            }
        });
        tokio::time::sleep(Duration::from_secs(25)).await;
        stop.cancel();
        task.await.unwrap();
        assert_eq!(passes.load(Ordering::Relaxed), 3, "at 0, 10 and 20 s");
    }
}
