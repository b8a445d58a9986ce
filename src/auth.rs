//! Key lookups for authentication, with a short per-node cache.
//!
//! A request on a known key costs one SHA-256 and a map lookup: no database
//! round trip. Every operator change to a key or an account drops the
//! affected entries on this node and is announced to the others
//! ([`store::changes`]): on PostgreSQL every node forgets them within
//! milliseconds ([`follow_changes`]). Where no announcement can arrive
//! (SQLite, or while a node's listening connection is down) the cache's
//! time to live, `auth.key_cache_seconds`, bounds how long a change waits.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use entities::{api_key, partner};
use foldhash::{HashMap, HashMapExt};
use ipnet::IpNet;
use sea_orm::DbErr;

use tokio_util::sync::CancellationToken;

use crate::{
    domain::{partner::Mode, rate::KeyBuckets},
    store::{
        self, Db,
        changes::{Change, Heard, Subscription},
    },
};

/// What authentication knows about a key and its account.
#[derive(Debug)]
pub struct KeyRecord {
    /// The key row.
    pub key: api_key::Model,
    /// The owning account as it was when looked up.
    pub partner: partner::Model,
    /// The key's mode.
    pub mode: Mode,
    /// Parsed allowlist; `None` means any source.
    pub allowlist: Option<Vec<IpNet>>,
    /// The key's rate-limit buckets, named once here instead of per request.
    pub buckets: KeyBuckets,
}

/// Cached key lookups by secret digest. The map hashes with foldhash, not
/// SipHash: only the digests of keys found in the database are kept, so no
/// caller chooses what it holds.
pub struct KeyDirectory {
    db: Db,
    ttl: Duration,
    cache: Mutex<HashMap<String, (Instant, Arc<KeyRecord>)>>,
}

impl KeyDirectory {
    pub fn new(db: Db, ttl: Duration) -> Self {
        Self {
            db,
            ttl,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The key whose secret has this digest, with its account.
    pub async fn lookup(&self, digest: &str) -> Result<Option<Arc<KeyRecord>>, DbErr> {
        if let Some(record) = self.cached(digest) {
            return Ok(Some(record));
        }
        // Boxed: the reads of a key not cached are a large state machine that
        // every request's future would otherwise carry (and copy).
        Box::pin(self.load(digest)).await
    }

    /// Reads a key not cached, and its partner, and caches them.
    async fn load(&self, digest: &str) -> Result<Option<Arc<KeyRecord>>, DbErr> {
        let Some(key) = store::keys::find_by_hash(&self.db, digest).await? else {
            return Ok(None);
        };
        let Some(partner) = store::partners::find(&self.db, &key.partner_id).await? else {
            return Ok(None);
        };
        let mode = key.mode;
        let record = Arc::new(KeyRecord {
            allowlist: parse_allowlist(key.allowed_cidrs.as_ref()),
            buckets: KeyBuckets::for_key(&key.id),
            key,
            partner,
            mode,
        });
        self.lock()
            .insert(digest.to_owned(), (Instant::now(), record.clone()));
        Ok(Some(record))
    }

    /// Forgets what `change` touched here and tells the other nodes. The
    /// change is already committed: if the announcement fails, the others
    /// see it when their cached entries expire, which is logged.
    pub async fn announce(&self, change: Change) {
        self.forget(&change);
        if let Err(err) = store::changes::publish(&self.db, &change).await {
            tracing::error!(
                error = %err,
                ?change,
                "could not announce a key or account change; other nodes see it within auth.key_cache_seconds"
            );
        }
    }

    /// Drops the cached entries `change` touched.
    pub fn forget(&self, change: &Change) {
        let mut cache = self.lock();
        match change {
            Change::Key(id) => cache.retain(|_, (_, record)| record.key.id != *id),
            Change::Partner(id) => cache.retain(|_, (_, record)| record.partner.id != *id),
        }
    }

    /// Drops every cached entry (after announcements may have been missed).
    pub fn forget_all(&self) {
        self.lock().clear();
    }

    fn cached(&self, digest: &str) -> Option<Arc<KeyRecord>> {
        let cache = self.lock();
        let (fetched, record) = cache.get(digest)?;
        (fetched.elapsed() < self.ttl).then(|| record.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Arc<KeyRecord>)>> {
        // Nothing panics while the lock is held; recover the map if it ever was.
        crate::sync::lock(&self.cache)
    }
}

/// Applies every change other nodes announce until `stop`.
///
/// Announcements made while the listening connection is down are lost, so
/// the whole cache is dropped each time listening starts again: whatever
/// is looked up afterwards is read from the database. While it cannot be
/// re-established, entries expire with their time to live as they would
/// without announcements.
pub(crate) async fn follow_changes(
    keys: Arc<KeyDirectory>,
    subscription: Subscription,
    stop: CancellationToken,
) {
    let mut subscription = Some(subscription);
    let mut retry = Backoff::default();
    loop {
        let Some(listening) = subscription.as_mut() else {
            if !retry.wait(&stop).await {
                return;
            }
            subscription = resubscribe(&keys).await;
            continue;
        };
        let heard = tokio::select! {
            _ = stop.cancelled() => return,
            heard = listening.next() => heard,
        };
        match heard {
            Ok(Heard::Change(change)) => {
                tracing::debug!(?change, "change announced");
                keys.forget(&change);
                retry = Backoff::default();
            }
            Ok(Heard::Gap) => {
                tracing::warn!("the listening connection was lost and is back; key cache dropped");
                keys.forget_all();
            }
            Err(err) => {
                tracing::warn!(error = %err, "stopped hearing key and account changes; listening again");
                keys.forget_all();
                subscription = None;
            }
        }
    }
}

/// A fresh subscription, the cache dropped once it listens; `None` when
/// it could not be made (tried again after a pause).
async fn resubscribe(keys: &KeyDirectory) -> Option<Subscription> {
    match store::changes::subscribe(&keys.db).await {
        Ok(Some(subscription)) => {
            keys.forget_all();
            tracing::info!("hearing key and account changes again");
            Some(subscription)
        }
        Ok(None) => None,
        Err(err) => {
            tracing::warn!(error = %err, "cannot listen for key and account changes yet");
            None
        }
    }
}

/// Doubling pauses between attempts to listen again, from 100 ms to 5 s.
struct Backoff(Duration);

impl Default for Backoff {
    fn default() -> Self {
        Self(Duration::from_millis(100))
    }
}

impl Backoff {
    /// Sleeps the current pause and doubles it; `false` when `stop` came first.
    async fn wait(&mut self, stop: &CancellationToken) -> bool {
        let pause = self.0;
        self.0 = (self.0 * 2).min(Duration::from_secs(5));
        tokio::select! {
            _ = stop.cancelled() => false,
            _ = tokio::time::sleep(pause) => true,
        }
    }
}

/// The stored JSON array of CIDRs; entries were validated when written.
fn parse_allowlist(stored: Option<&serde_json::Value>) -> Option<Vec<IpNet>> {
    let list = stored?.as_array()?;
    Some(
        list.iter()
            .filter_map(|v| v.as_str().and_then(|s| s.parse().ok()))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every request awaits a key's lookup: the reads of a key not cached
    /// are boxed, so the lookup's future (and every request's future that
    /// holds it, copied as the request moves through its layers) stays a
    /// fraction of theirs.
    #[test]
    fn a_lookup_carries_the_reads_of_a_key_not_cached_boxed() {
        let keys = KeyDirectory::new(Db::default(), Duration::from_secs(60));
        let lookup = std::mem::size_of_val(&keys.lookup("digest"));
        let reads = std::mem::size_of_val(&keys.load("digest"));
        assert!(lookup <= 128, "a lookup's future is {lookup} bytes");
        assert!(reads >= 4 * lookup, "the reads' future is {reads} bytes");
    }
}
