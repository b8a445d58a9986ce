//! Integration tests: the real service on ephemeral ports against a fresh
//! database per test (SQLite, or PostgreSQL when `TEST_DATABASE_URL` is set),
//! spoken to over HTTP.

mod admission;
mod audit;
mod auth;
mod authz;
mod backup;
mod browser;
mod catalogue;
mod connections;
mod console;
mod contract;
mod deposits;
mod docs;
mod envelope;
mod failover;
mod faults;
mod four_eyes;
mod healing;
mod health;
mod helpers;
mod hostile;
mod lifecycle;
mod logs;
mod me;
mod metrics;
mod openapi;
mod operator;
mod orders;
mod profile;
mod rate_limits;
mod redis_outage;
mod reviews;
mod revocation;
mod roles;
mod secrets;
mod simulate;
mod supplier;
mod unix_socket;
