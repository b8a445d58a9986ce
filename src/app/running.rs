//! Running a node: the routers of the three listeners, the background loops,
//! and the orderly stop.

use std::{future::Future, time::Duration};

use anyhow::Context;

use axum::{
    Router,
    extract::{DefaultBodyLimit, State},
    middleware,
    routing::get,
};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tower_http::{catch_panic::CatchPanicLayer, limit::RequestBodyLimitLayer};

use super::Application;
use crate::{
    actors::provisioning::ProvisioningHandle,
    docs,
    http::{
        self,
        envelope::{EnvelopeContext, FinalBody, envelope},
        error::{ApiError, ErrorCode},
        server::serve,
    },
    operator, simulators,
    state::AppState,
    store,
};

/// When this node started and how often it says it is alive.
#[derive(Debug, Clone, Copy)]
pub(super) struct Heartbeat {
    pub(super) started_at: chrono::DateTime<chrono::Utc>,
    pub(super) every: Duration,
}

impl Application {
    /// Serves until `shutdown` resolves, then stops accepting, lets in-flight
    /// requests finish, and closes the pool.
    pub async fn run_until_stopped(
        mut self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let stop = CancellationToken::new();
        tokio::spawn({
            let stop = stop.clone();
            async move {
                shutdown.await;
                tracing::info!("shutdown requested; draining in-flight requests");
                stop.cancel();
            }
        });
        let loops = self.spawn_loops(&stop);
        let served = self.serve_listeners(&stop).await;
        stop.cancel();
        for task in loops {
            let _ = task.await;
        }
        self.drain().await;
        served
    }

    /// The public, operator and simulator listeners, until `stop`.
    async fn serve_listeners(&mut self, stop: &CancellationToken) -> anyhow::Result<()> {
        let bound = self.bound.take().context("the node is already running")?;
        let envelope_ctx = EnvelopeContext {
            docs_base: self.state.docs_base.clone(),
            listener: None,
            request_timeout: None,
        };
        let public_ctx = EnvelopeContext {
            listener: Some("public"),
            request_timeout: Some(self.tuning.request_timeout),
            ..envelope_ctx.clone()
        };
        let operator_ctx = EnvelopeContext {
            listener: Some("operator"),
            ..envelope_ctx.clone()
        };
        let public = serve(
            bound.public,
            finish(
                public_router(&self.state),
                &public_ctx,
                self.tuning.body_limit,
            ),
            self.tuning.connection_limits,
            stop.clone(),
        );
        let operator = serve(
            bound.operator,
            finish(
                operator_router(&self.state, self.tuning.metrics_require_token),
                &operator_ctx,
                self.tuning.operator_body_limit,
            ),
            self.tuning.connection_limits,
            stop.clone(),
        );
        // The stand-ins answer errors in their own services' shapes: the
        // envelope leaves their bodies alone.
        let simulator_routes =
            simulators::routes(&self.sims).layer(middleware::map_response(as_final_body));
        let simulators = async {
            match bound.simulators {
                Some(listener) => {
                    let router = finish(
                        simulator_routes,
                        &envelope_ctx,
                        self.tuning.operator_body_limit,
                    );
                    serve(
                        listener,
                        router,
                        self.tuning.connection_limits,
                        stop.clone(),
                    )
                    .await
                }
                None => Ok(()),
            }
        };
        tokio::try_join!(public, operator, simulators).map(|_| ())
    }

    /// The loops a node runs beside its listeners, each until `stop`.
    fn spawn_loops(&mut self, stop: &CancellationToken) -> Vec<JoinHandle<()>> {
        let state = &self.state;
        let mut loops = vec![
            tokio::spawn(refresh_catalogue(
                state.clone(),
                self.tuning.catalogue_refresh,
                stop.clone(),
            )),
            tokio::spawn(beat_until_stopped(
                state.clone(),
                self.heartbeat,
                stop.clone(),
            )),
        ];
        if let Some(subscription) = self.changes.take() {
            loops.push(tokio::spawn(crate::auth::follow_changes(
                state.keys.clone(),
                subscription,
                stop.clone(),
            )));
        }
        if let Some(admission) = state.admission.clone() {
            loops.push(tokio::spawn(
                crate::actors::admission::refresh_until_stopped(
                    admission,
                    state.db.clone(),
                    self.tuning.admission_refresh,
                    stop.clone(),
                ),
            ));
        }
        if let Some(schedule) = self.tuning.backup.clone() {
            tracing::info!(every_seconds = schedule.every.as_secs(), dir = %schedule.dir.display(), keep = schedule.keep, "periodic backups on");
            loops.push(tokio::spawn(crate::backup::run_periodic(
                state.db.clone(),
                schedule,
                state.last_backup.clone(),
                stop.clone(),
            )));
        }
        if let Some(every) = self.tuning.deposit_reconcile {
            loops.push(tokio::spawn(crate::deposits::reconcile_until_stopped(
                state.deposits.clone(),
                every,
                stop.clone(),
            )));
        }
        loops
    }

    /// Orderly, each step bounded: every account actor commits what is
    /// queued (no new actor starts); provisioning stops taking work and the
    /// passes under way get a moment to finish; then the node says it
    /// stopped, so other nodes take over what it still holds at once.
    async fn drain(&self) {
        let patience = Duration::from_secs(10);
        self.state.accounts.drain_all(patience).await;
        if let Some(handle) = self.state.accounts.provisioning() {
            handle.detach();
        }
        if let Some(services) = &self.services {
            let _ = services
                .stop_and_wait(Some("shutdown".into()), Some(patience))
                .await;
        }
        self.provisioning_tasks.close();
        if tokio::time::timeout(patience, self.provisioning_tasks.wait())
            .await
            .is_err()
        {
            tracing::info!(
                passes = self.provisioning_tasks.len(),
                "provisioning passes still under way at shutdown are left to the other nodes or the next start"
            );
        }
        // Whatever this node still holds is free for the others now.
        if let Err(err) = store::nodes::stopped(
            &self.state.db,
            &self.state.node_id,
            crate::domain::time::now(),
        )
        .await
        {
            tracing::warn!(error = %err, "could not record this node's stop; its claims lapse with their lease");
        }
        self.state.db.close_by_ref().await.ok();
        tracing::info!("stopped");
    }
}

/// The partner API, the reference pages and the provider callbacks (their
/// time bound is the envelope's: [`EnvelopeContext::request_timeout`]).
fn public_router(state: &AppState) -> Router {
    Router::new()
        .merge(http::partner_routes(state))
        .nest("/docs", docs::routes())
        .nest("/callbacks", http::callback_routes())
        .with_state(state.clone())
}

/// The operator API and `/metrics` (behind the operator token if asked).
fn operator_router(state: &AppState, metrics_require_token: bool) -> Router {
    let mut metrics = Router::new().route("/metrics", get(render_metrics));
    if metrics_require_token {
        metrics = metrics.route_layer(middleware::from_fn_with_state(
            state.clone(),
            operator::authorize,
        ));
    }
    Router::new()
        .nest("/operator/v1", operator::routes(state.clone()))
        .nest("/console", operator::console_routes())
        .merge(metrics)
        .with_state(state.clone())
}

/// `GET /metrics` on the operator listener: the gauges read from their
/// sources at scrape time, then every series.
async fn render_metrics(State(state): State<AppState>) -> axum::response::Response {
    let load = state.accounts.load();
    crate::metrics::render(crate::metrics::ScrapeGauges {
        accounts_live: load.live,
        accounts_queued: load.queued,
        accounts_max_queued: load.max_queued,
        provisioning_running: state
            .accounts
            .provisioning()
            .is_some_and(ProvisioningHandle::is_running),
        pool: store::pool_use(&state.db),
        inline_reads: state.inline_reads.as_ref().map(|reader| reader.counts()),
        gathered_reads: state.float_reads.counts(),
        write_gate: store::write_gate_use(&state.db),
    })
}

/// Records this node's heartbeat until `stop`; a missed beat is logged and
/// retried at the next tick (three missed and other nodes take its claims).
async fn beat_until_stopped(state: AppState, heartbeat: Heartbeat, stop: CancellationToken) {
    crate::periodic::every(heartbeat.every, &stop, || async {
        let now = crate::domain::time::now();
        if let Err(err) =
            store::nodes::beat(&state.db, &state.node_id, heartbeat.started_at, now).await
        {
            tracing::warn!(error = %err, node_id = %state.node_id, "heartbeat not recorded");
        }
    })
    .await;
}

/// Notices catalogue changes made through other nodes.
async fn refresh_catalogue(state: AppState, every: Duration, stop: CancellationToken) {
    crate::periodic::every(every, &stop, || async {
        if let Err(err) = state.catalogue.refresh_if_changed().await {
            tracing::warn!(error = %err, "catalogue refresh failed; serving the last snapshot");
        }
    })
    .await;
}

/// Adds what every listener shares: the unknown-path fallback, panic
/// catching, the body limit, and (outermost) the error envelope.
/// Marks a response's body as final, so the envelope does not replace it.
async fn as_final_body(mut response: axum::response::Response) -> axum::response::Response {
    response.extensions_mut().insert(FinalBody);
    response
}

fn finish(router: Router, ctx: &EnvelopeContext, body_limit: usize) -> Router {
    router
        .fallback(|| async { ApiError::new(ErrorCode::NotFound).with_message("No such path.") })
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(RequestBodyLimitLayer::new(body_limit))
        .layer(CatchPanicLayer::new())
        .layer(middleware::from_fn_with_state(ctx.clone(), envelope))
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {},
        () = terminate => {},
    }
}
