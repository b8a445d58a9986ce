//! Key lookups for authentication, with a short per-node cache.
//!
//! A request on a known key costs one SHA-256 and a map lookup: no database
//! round trip. The cache is invalidated on this node by every operator change
//! to a key or an account; other nodes see a change within
//! `auth.key_cache_seconds`.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use entities::{api_key, partner};
use ipnet::IpNet;
use sea_orm::DbErr;

use crate::{
    domain::partner::Mode,
    store::{self, Db},
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
}

/// Cached key lookups by secret digest.
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
        let Some(key) = store::keys::find_by_hash(&self.db, digest).await? else {
            return Ok(None);
        };
        let Some(partner) = store::partners::find(&self.db, &key.partner_id).await? else {
            return Ok(None);
        };
        let Some(mode) = Mode::parse(&key.mode) else {
            return Err(DbErr::Custom(format!("key {} has an unknown mode", key.id)));
        };
        let record = Arc::new(KeyRecord {
            allowlist: parse_allowlist(key.allowed_cidrs.as_ref()),
            key,
            partner,
            mode,
        });
        self.lock()
            .insert(digest.to_owned(), (Instant::now(), record.clone()));
        Ok(Some(record))
    }

    /// Drops every cached entry of one key.
    pub fn forget_key(&self, key_id: &str) {
        self.lock().retain(|_, (_, record)| record.key.id != key_id);
    }

    /// Drops every cached entry of one account's keys.
    pub fn forget_partner(&self, partner_id: &str) {
        self.lock()
            .retain(|_, (_, record)| record.partner.id != partner_id);
    }

    fn cached(&self, digest: &str) -> Option<Arc<KeyRecord>> {
        let cache = self.lock();
        let (fetched, record) = cache.get(digest)?;
        (fetched.elapsed() < self.ttl).then(|| record.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Arc<KeyRecord>)>> {
        // Nothing panics while the lock is held; recover the map if it ever was.
        self.cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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
