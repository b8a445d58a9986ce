//! How many Idempotency-Keys an account actor keeps in memory.
//!
//! An actor remembers the keys it bound, so that a retry is answered from
//! memory. A key it does not hold is decided as new and bound by the
//! commit, which turns back a key bound already (a retry the actor forgot)
//! and replays it from the database: memory only makes a replay cheaper,
//! never decides one. Each actor used to keep up to 4,096 keys whatever the
//! number of actors, so a thousand partners ordering without pause held up
//! to four million bindings (some 400 bytes each). The keys all live actors
//! keep are now bounded together: each keeps an even share of
//! [`KEYS_IN_ALL`], between [`KEYS_AT_LEAST`] and [`KEYS_AT_MOST`].

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

/// The keys one account remembers at most (a partner alone, or among a
/// few).
const KEYS_AT_MOST: usize = 4096;

/// The keys all live accounts remember together, when each keeps more than
/// [`KEYS_AT_LEAST`]: some 100 MiB of bindings.
const KEYS_IN_ALL: usize = 262_144;

/// The keys one account remembers however many are live: the last moments
/// of a busy partner's retries.
const KEYS_AT_LEAST: usize = 64;

/// The keys one account remembers while `live` accounts are running; past
/// it the account clears its memory (the database still knows every key).
pub(super) fn keys_kept(live: usize) -> usize {
    (KEYS_IN_ALL / live.max(1)).clamp(KEYS_AT_LEAST, KEYS_AT_MOST)
}

/// The number of account actors running, shared by all of them.
#[derive(Clone, Default)]
pub(crate) struct LiveAccounts(Arc<AtomicUsize>);

impl LiveAccounts {
    /// Counts one more running account until the returned token is dropped
    /// (with the actor's state, however the actor ends).
    pub(super) fn enter(&self) -> LiveAccount {
        self.0.fetch_add(1, Ordering::Relaxed);
        LiveAccount(self.0.clone())
    }

    /// Running accounts now.
    pub(super) fn count(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// One running account, counted in [`LiveAccounts`] while it is held.
pub(super) struct LiveAccount(Arc<AtomicUsize>);

impl Drop for LiveAccount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_accounts_keep_the_most_and_many_share_the_whole() {
        assert_eq!(keys_kept(0), KEYS_AT_MOST);
        assert_eq!(keys_kept(1), KEYS_AT_MOST);
        assert_eq!(keys_kept(64), KEYS_AT_MOST);
        assert_eq!(keys_kept(100), 2_621);
        assert_eq!(keys_kept(1_000), 262);
        assert_eq!(keys_kept(100_000), KEYS_AT_LEAST);
        // Past a few accounts, all of them together keep at most the whole.
        for live in 64..=KEYS_IN_ALL / KEYS_AT_LEAST {
            assert!(keys_kept(live) * live <= KEYS_IN_ALL, "{live} accounts");
        }
    }

    #[test]
    fn an_account_counts_while_its_token_lives() {
        let live = LiveAccounts::default();
        let first = live.enter();
        let second = live.clone().enter();
        assert_eq!(live.count(), 2);
        drop(first);
        assert_eq!(live.count(), 1);
        drop(second);
        assert_eq!(live.count(), 0);
    }
}
