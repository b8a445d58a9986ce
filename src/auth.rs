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
use foldhash::HashMap;
use ipnet::IpNet;
use sea_orm::DbErr;

use tokio::sync::watch;
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
///
/// A digest not cached (or expired) is read by one lookup while the others
/// for it wait for that read instead of each reading too: a hot key expiring
/// under load costs one read, not one per request in flight. A change
/// forgotten while a read is under way makes that read start again, so a
/// key revoked (or an account suspended) as it was being read is never
/// cached as it was before.
pub struct KeyDirectory {
    db: Db,
    ttl: Duration,
    cache: Mutex<Cache>,
}

/// The cached lookups and what tells a read whether a change overtook it.
#[derive(Default)]
struct Cache {
    /// Each digest looked up: its record, or the read under way.
    slots: HashMap<String, Slot>,
    /// Counts the changes forgotten: a read that began under an older count
    /// may have seen the rows from before the change.
    changes: u64,
    /// Names the reads, so that a read only ever clears its own slot.
    reads: u64,
}

/// A digest's place in the cache.
enum Slot {
    /// The key and its account as read at `fetched`.
    Ready {
        /// When they were read.
        fetched: Instant,
        /// What was read.
        record: Arc<KeyRecord>,
    },
    /// A read under way, which later lookups of the digest wait for.
    Reading {
        /// The read's number ([`Cache::reads`]).
        read: u64,
        /// Where the read's outcome is published.
        outcome: watch::Receiver<Option<Shared>>,
    },
}

/// A read's outcome as the lookups that waited for it receive it: the
/// record, none for an unknown digest, or the database's error as text.
type Shared = Result<Option<Arc<KeyRecord>>, Arc<str>>;

/// What a lookup does next.
enum Claim {
    /// Answer with the cached record.
    Cached(Arc<KeyRecord>),
    /// Wait for another lookup's read.
    Wait(watch::Receiver<Option<Shared>>),
    /// Read the digest itself.
    Read(Reading),
}

/// A read this lookup owns: its number, where its outcome goes, and the
/// count of changes it began under.
struct Reading {
    read: u64,
    outcome: watch::Sender<Option<Shared>>,
    changes: u64,
}

/// Most reads one lookup makes while changes keep overtaking them; what the
/// last one found is answered without being cached.
const READS_WHILE_CHANGING: usize = 3;

impl KeyDirectory {
    pub fn new(db: Db, ttl: Duration) -> Self {
        Self {
            db,
            ttl,
            cache: Mutex::new(Cache::default()),
        }
    }

    /// The key whose secret has this digest, with its account.
    pub async fn lookup(&self, digest: &str) -> Result<Option<Arc<KeyRecord>>, DbErr> {
        loop {
            match self.claim(digest) {
                Claim::Cached(record) => return Ok(Some(record)),
                // Boxed: the reads of a key not cached, and the wait for
                // them, are state machines that every request's future would
                // otherwise carry (and copy).
                Claim::Read(reading) => return Box::pin(self.read(digest, reading)).await,
                Claim::Wait(outcome) => {
                    if let Some(shared) = Box::pin(waited(outcome)).await {
                        return shared.map_err(|error| DbErr::Custom(error.to_string()));
                    }
                    // The reading lookup went away before it finished (its
                    // request was dropped): look again.
                }
            }
        }
    }

    /// The cached record, the read to wait for, or a read of our own.
    fn claim(&self, digest: &str) -> Claim {
        let mut cache = self.lock();
        match cache.slots.get(digest) {
            Some(Slot::Ready { fetched, record }) if fetched.elapsed() < self.ttl => {
                return Claim::Cached(record.clone());
            }
            Some(Slot::Reading { outcome, .. }) => return Claim::Wait(outcome.clone()),
            _ => {}
        }
        cache.reads += 1;
        let read = cache.reads;
        let (outcome, receiver) = watch::channel(None);
        cache.slots.insert(
            digest.to_owned(),
            Slot::Reading {
                read,
                outcome: receiver,
            },
        );
        Claim::Read(Reading {
            read,
            outcome,
            changes: cache.changes,
        })
    }

    /// Reads a key and its partner, caches them unless a change overtook the
    /// read (then reads again), and tells the lookups that waited.
    async fn read(&self, digest: &str, reading: Reading) -> Result<Option<Arc<KeyRecord>>, DbErr> {
        let mut unfinished = Unfinished {
            directory: self,
            digest,
            read: reading.read,
            outcome: reading.outcome,
        };
        let mut changes = reading.changes;
        let mut attempt = 1;
        let read = loop {
            crate::metrics::key_read();
            let read = self.read_rows(digest).await;
            match self.settle(digest, reading.read, changes, &read) {
                Settle::Done => break read,
                Settle::Overtaken(now) if attempt < READS_WHILE_CHANGING => {
                    changes = now;
                    attempt += 1;
                }
                Settle::Overtaken(_) => {
                    self.clear(digest, reading.read);
                    break read;
                }
            }
        };
        unfinished.read = 0;
        let shared = match &read {
            Ok(record) => Ok(record.clone()),
            Err(err) => Err(Arc::from(err.to_string())),
        };
        unfinished.outcome.send_replace(Some(shared));
        read
    }

    /// The key row of `digest` and its partner (one query), as one record.
    async fn read_rows(&self, digest: &str) -> Result<Option<Arc<KeyRecord>>, DbErr> {
        let Some((key, partner)) = store::keys::find_by_hash(&self.db, digest).await? else {
            return Ok(None);
        };
        let mode = key.mode;
        Ok(Some(Arc::new(KeyRecord {
            allowlist: parse_allowlist(key.allowed_cidrs.as_ref()),
            buckets: KeyBuckets::for_key(&key.id),
            key,
            partner,
            mode,
        })))
    }

    /// Caches what read `read` found, unless a change was forgotten since
    /// `changes`: then nothing is cached and the count now is returned.
    fn settle(
        &self,
        digest: &str,
        read: u64,
        changes: u64,
        found: &Result<Option<Arc<KeyRecord>>, DbErr>,
    ) -> Settle {
        let mut cache = self.lock();
        if cache.changes != changes {
            return Settle::Overtaken(cache.changes);
        }
        match found {
            Ok(Some(record)) => {
                cache.slots.insert(
                    digest.to_owned(),
                    Slot::Ready {
                        fetched: Instant::now(),
                        record: record.clone(),
                    },
                );
            }
            // Unknown digests are not kept: callers choose them.
            Ok(None) | Err(_) => remove_reading(&mut cache, digest, read),
        }
        Settle::Done
    }

    /// Drops the slot of read `read` if it is still there.
    fn clear(&self, digest: &str, read: u64) {
        remove_reading(&mut self.lock(), digest, read);
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

    /// Drops the cached entries `change` touched; reads under way start
    /// again.
    pub fn forget(&self, change: &Change) {
        let mut cache = self.lock();
        cache.changes += 1;
        cache.slots.retain(|_, slot| match slot {
            Slot::Ready { record, .. } => match change {
                Change::Key(id) => record.key.id != *id,
                Change::Partner(id) => record.partner.id != *id,
            },
            Slot::Reading { .. } => true,
        });
    }

    /// Drops every cached entry (after announcements may have been missed);
    /// reads under way start again.
    pub fn forget_all(&self) {
        let mut cache = self.lock();
        cache.changes += 1;
        cache
            .slots
            .retain(|_, slot| matches!(slot, Slot::Reading { .. }));
    }

    #[cfg(test)]
    fn cached(&self, digest: &str) -> Option<Arc<KeyRecord>> {
        match self.lock().slots.get(digest)? {
            Slot::Ready { fetched, record } if fetched.elapsed() < self.ttl => Some(record.clone()),
            _ => None,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        // Nothing panics while the lock is held; recover the map if it ever was.
        crate::sync::lock(&self.cache)
    }
}

/// Whether a read's outcome was cached (or needed no caching), or a change
/// overtook it (with the count of changes now).
enum Settle {
    Done,
    Overtaken(u64),
}

/// Removes `digest`'s slot if it is read `read`'s.
fn remove_reading(cache: &mut Cache, digest: &str, read: u64) {
    if matches!(cache.slots.get(digest), Some(Slot::Reading { read: r, .. }) if *r == read) {
        cache.slots.remove(digest);
    }
}

/// The outcome another lookup's read published; `None` if that lookup went
/// away first.
async fn waited(mut outcome: watch::Receiver<Option<Shared>>) -> Option<Shared> {
    let published = outcome.wait_for(Option::is_some).await.ok()?;
    published.clone()
}

/// A read's slot and where its outcome goes. Dropped before the read
/// finished (its request went away), it clears the slot first, and only
/// then (as its fields drop) wakes the lookups waiting, so that they look
/// again and one of them reads.
struct Unfinished<'a> {
    directory: &'a KeyDirectory,
    digest: &'a str,
    /// The read's number; 0 once it finished.
    read: u64,
    /// Where the outcome is published.
    outcome: watch::Sender<Option<Shared>>,
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if self.read != 0 {
            self.directory.clear(self.digest, self.read);
        }
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
    use std::pin::pin;

    use futures::{FutureExt, future::join_all, poll};

    use super::*;
    use crate::domain::api_key;

    /// Every request awaits a key's lookup: the reads of a key not cached
    /// are boxed, so the lookup's future (and every request's future that
    /// holds it, copied as the request moves through its layers) stays a
    /// fraction of theirs.
    #[test]
    fn a_lookup_carries_the_reads_of_a_key_not_cached_boxed() {
        let keys = KeyDirectory::new(Db::default(), Duration::from_secs(60));
        let lookup = std::mem::size_of_val(&keys.lookup("digest"));
        let reads = std::mem::size_of_val(&keys.read_rows("digest"));
        assert!(lookup <= 128, "a lookup's future is {lookup} bytes");
        assert!(reads >= 4 * lookup, "the reads' future is {reads} bytes");
    }

    /// A migrated database with a live key of a partner: the folder (it
    /// goes with the file), the directory over the database, the key's id
    /// and its secret's digest.
    async fn a_key(name: &str) -> (tempfile::TempDir, KeyDirectory, String, String) {
        let (dir, db, partner_id) = crate::store::fixtures::funded_partner(name).await;
        let issued = api_key::issue(Mode::Live);
        let new = store::keys::NewKey {
            id: format!("pk_{name}"),
            partner_id,
            mode: Mode::Live,
            label: "test".into(),
            secret_hash: issued.hash.clone(),
            last4: issued.last4,
            allowed_cidrs: None,
            expires_at: None,
        };
        let key = store::keys::insert(&db, new, chrono::Utc::now())
            .await
            .unwrap();
        let keys = KeyDirectory::new(db, Duration::from_secs(60));
        (dir, keys, key.id, issued.hash)
    }

    /// Both of the pool's connections, held: no read can finish until they
    /// are dropped.
    async fn hold_the_pool(
        keys: &KeyDirectory,
    ) -> [sea_orm::sqlx::pool::PoolConnection<sea_orm::sqlx::Sqlite>; 2] {
        let pool = keys.db.get_sqlite_connection_pool();
        [pool.acquire().await.unwrap(), pool.acquire().await.unwrap()]
    }

    fn reads_begun(keys: &KeyDirectory) -> u64 {
        keys.lock().reads
    }

    #[tokio::test]
    async fn lookups_of_a_key_not_cached_share_one_read() {
        let (_dir, keys, _, digest) = a_key("shared.db").await;
        let held = hold_the_pool(&keys).await;
        let mut all = pin!(join_all((0..32).map(|_| keys.lookup(&digest))));
        assert!(poll!(all.as_mut()).is_pending());
        drop(held);
        let found = all.await;
        let first = found[0].as_ref().unwrap().as_ref().unwrap();
        for record in &found {
            let record = record.as_ref().unwrap().as_ref().unwrap();
            assert!(
                Arc::ptr_eq(record, first),
                "every lookup got the one read's record"
            );
        }
        assert_eq!(
            reads_begun(&keys),
            1,
            "32 lookups in flight read the key once"
        );
        keys.lookup(&digest).await.unwrap().unwrap();
        assert_eq!(
            reads_begun(&keys),
            1,
            "the next lookup is served from the cache"
        );
    }

    #[tokio::test]
    async fn lookups_of_an_unknown_key_share_the_answer_and_keep_nothing() {
        let (_dir, keys, _, _) = a_key("unknown.db").await;
        let unknown = api_key::digest("svc_sk_live_unknown");
        // The read held back until every lookup is in flight.
        let held = hold_the_pool(&keys).await;
        let mut all = pin!(join_all((0..8).map(|_| keys.lookup(&unknown))));
        assert!(poll!(all.as_mut()).is_pending());
        drop(held);
        let found = all.await;
        assert!(found.iter().all(|f| matches!(f, Ok(None))));
        assert_eq!(reads_begun(&keys), 1);
        assert!(
            keys.lock().slots.is_empty(),
            "an unknown digest is not kept"
        );
    }

    /// The race a revocation can lose: a read that saw the key before it
    /// was revoked finishes after the revocation was forgotten here. What it
    /// read is not cached; read again, the key is revoked.
    #[tokio::test]
    async fn a_key_revoked_while_it_was_being_read_is_never_cached_as_it_was() {
        let (_dir, keys, key_id, digest) = a_key("revoked.db").await;
        let Claim::Read(reading) = keys.claim(&digest) else {
            panic!("nothing was cached yet");
        };
        let before = keys.read_rows(&digest).await;
        assert!(
            before
                .as_ref()
                .unwrap()
                .as_ref()
                .unwrap()
                .key
                .revoked_at
                .is_none()
        );

        let key = store::keys::find(&keys.db, &key_id).await.unwrap().unwrap();
        store::keys::revoke(&keys.db, key, chrono::Utc::now())
            .await
            .unwrap();
        keys.forget(&Change::Key(key_id.clone()));

        assert!(matches!(
            keys.settle(&digest, reading.read, reading.changes, &before),
            Settle::Overtaken(_)
        ));
        assert!(
            keys.cached(&digest).is_none(),
            "the read from before is not kept"
        );

        // The same, end to end: the read starts again and caches the change.
        let record = keys.read(&digest, reading).await.unwrap().unwrap();
        assert!(
            record.key.revoked_at.is_some(),
            "read again after the change"
        );
        assert!(keys.cached(&digest).unwrap().key.revoked_at.is_some());
    }

    #[tokio::test]
    async fn lookups_waiting_on_a_dropped_read_look_again_and_read_themselves() {
        let (_dir, keys, _, digest) = a_key("dropped.db").await;
        let Claim::Read(reading) = keys.claim(&digest) else {
            panic!("nothing was cached yet");
        };
        let held = hold_the_pool(&keys).await;
        let mut waiting = pin!(keys.lookup(&digest));
        assert!(
            poll!(waiting.as_mut()).is_pending(),
            "it waits for the read under way"
        );
        // The reading request goes away part-way: polled once, then dropped.
        assert!(keys.read(&digest, reading).now_or_never().is_none());
        drop(held);

        let record = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the waiting lookup is not left hanging")
            .unwrap();
        assert!(record.is_some());
        assert!(
            reads_begun(&keys) >= 2,
            "the waiting lookup read the key itself"
        );
        assert!(keys.cached(&digest).is_some());
    }
}
