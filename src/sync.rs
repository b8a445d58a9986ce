//! Locking the in-memory state that tasks share.

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, taking its data even when a task panicked while holding
/// it. Every mutex of this crate guards short critical sections that never
/// await and never panic half-way (inserts, removes, reads and counters),
/// so the data behind a poisoned lock is still consistent.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
