//! Builds the service and runs it.
//!
//! - [`wiring`]: opens the database and applies migrations, binds the
//!   listeners (port 0 picks a free one), starts the actors and assembles
//!   what handlers share;
//! - [`running`]: serves the three listeners and the background loops until
//!   a shutdown signal, then drains in-flight requests and actors, records
//!   the node's stop and closes the pool;
//! - [`simulate()`]: the simulators alone, in a process of their own.

use std::net::SocketAddr;

use ractor::ActorRef;
use tokio::net::TcpListener;

use crate::{
    actors::services::ServicesMsg,
    state::AppState,
    store::{self, Db},
};

mod running;
mod simulate;
mod supply;
mod wiring;

pub use running::shutdown_signal;
pub use simulate::simulate;

/// A built, bound, not yet running service.
pub struct Application {
    state: AppState,
    /// What the running node reads from the configuration.
    tuning: wiring::Tuning,
    /// The listeners, until the node runs.
    bound: Option<Bound>,
    public_addr: SocketAddr,
    operator_addr: SocketAddr,
    simulators_addr: Option<SocketAddr>,
    heartbeat: running::Heartbeat,
    /// Provisioning passes under way, waited for (bounded) at shutdown.
    provisioning_tasks: tokio_util::task::TaskTracker,
    /// The stand-ins, when they run.
    sims: crate::simulators::Simulators,
    services: Option<ActorRef<ServicesMsg>>,
    /// This node's ear on key and account changes made on other nodes
    /// (PostgreSQL); listening starts before the first request is accepted.
    changes: Option<store::changes::Subscription>,
}

impl Application {
    /// The bound partner API address.
    pub fn public_addr(&self) -> SocketAddr {
        self.public_addr
    }

    /// The bound operator API address.
    pub fn operator_addr(&self) -> SocketAddr {
        self.operator_addr
    }

    /// The bound simulators address, when they run.
    pub fn simulators_addr(&self) -> Option<SocketAddr> {
        self.simulators_addr
    }

    /// The database pool (tests use it to sabotage the database).
    pub fn db(&self) -> Db {
        self.state.db.clone()
    }
}

/// The bound listeners, handed to the servers when the node runs.
struct Bound {
    public: TcpListener,
    operator: TcpListener,
    simulators: Option<TcpListener>,
}
