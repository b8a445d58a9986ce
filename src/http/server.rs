//! Accepting connections: HTTP/1.1 and HTTP/2 with the limits a public
//! listener needs before any handler runs.
//!
//! `axum::serve` has no header-read timeout and no header size setting, so
//! connections are served here with hyper directly: a peer that sends its
//! headers slower than `header_read_timeout` is cut off (slowloris), and a
//! request whose head exceeds `max_header_bytes` is answered 431 by hyper.
//! Shutdown stops accepting, then waits for open connections to finish.

use std::{net::SocketAddr, time::Duration};

use axum::{Router, extract::Request};
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::{conn::auto::Builder, graceful::GracefulShutdown},
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::{Service, ServiceExt};

/// What a connection may cost before a handler sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnectionLimits {
    /// Longest a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// Largest request head (request line and headers), in bytes.
    pub max_header_bytes: usize,
}

/// hyper refuses a read buffer under 8 KiB.
const MIN_HEADER_BYTES: usize = 8192;

/// Serves `router` on `listener` until `stop` is cancelled, then lets open
/// connections finish their requests.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes.max(MIN_HEADER_BYTES));
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
    let graceful = GracefulShutdown::new();
    let mut make_service = router.into_make_service_with_connect_info::<SocketAddr>();
    loop {
        let (socket, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors and the like: the listener
                    // itself is fine, so keep accepting.
                    tracing::warn!(error = %err, "accepting a connection failed");
                    continue;
                }
            },
            () = stop.cancelled() => break,
        };
        // Small answers should leave at once rather than wait for Nagle.
        let _ = socket.set_nodelay(true);
        let service = match make_service.call(peer).await {
            Ok(service) => service,
            Err(never) => match never {},
        };
        let hyper_service = hyper::service::service_fn(move |request: Request<Incoming>| {
            service.clone().oneshot(request)
        });
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(socket), hyper_service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            // A client that vanishes or times out is not the server's error.
            if let Err(err) = connection.await {
                tracing::debug!(error = %err, %peer, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}
