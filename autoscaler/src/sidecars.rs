//! The sidecars attached to each pool: their tokens, and what they last told us about
//! themselves (runner `info`, `system_id`, when they last asked for a job).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use rand::RngExt;
use serde_json::{Map, Value};

use crate::clock::Clock;
use crate::core::features::common_features;
use crate::core::{Millis, SidecarId};
use crate::secret::{Secret, TokenDigest};
use crate::store::{SidecarRecord, Store, StoreError};

/// A sidecar counts as part of its pool's feature set while it asked for a job this recently.
const LIVE_WINDOW_MS: Millis = 10 * 60 * 1000;
/// A pool's `info` is recomputed at most this often: it is read on every job request to
/// GitLab, and computing it looks at every sidecar of the pool.
const POOL_INFO_TTL_MS: Millis = 1000;

#[derive(Debug)]
pub struct Sidecar {
    pub record: SidecarRecord,
    seen: Mutex<Seen>,
}

#[derive(Debug, Default, Clone)]
struct Seen {
    last_poll: Option<Millis>,
    /// The last request of any kind from this sidecar (job requests, and calls for its jobs).
    last_seen: Option<Millis>,
    info: Option<Map<String, Value>>,
    system_id: Option<String>,
}

impl Sidecar {
    pub fn id(&self) -> SidecarId {
        self.record.id
    }

    pub fn pool(&self) -> &str {
        &self.record.pool
    }

    pub fn last_poll(&self) -> Option<Millis> {
        self.lock().last_poll
    }

    pub fn last_seen(&self) -> Option<Millis> {
        self.lock().last_seen
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

mod table;
use table::Table;

#[derive(Debug)]
pub struct Sidecars {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    table: RwLock<Table>,
    /// Each pool's `info` and when it was computed.
    pool_infos: Mutex<HashMap<String, (Millis, Option<Value>)>>,
}

impl Sidecars {
    /// Loads the sidecars the store knows.
    pub fn load(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Result<Self, StoreError> {
        // After a restart every known sidecar gets a fresh grace before it counts as silent.
        let now = clock.now();
        let mut table = Table::default();
        for record in store.sidecars()? {
            table.insert(Arc::new(Sidecar {
                record,
                seen: Mutex::new(Seen {
                    last_seen: Some(now),
                    ..Seen::default()
                }),
            }));
        }
        Ok(Self {
            store,
            clock,
            table: RwLock::new(table),
            pool_infos: Mutex::new(HashMap::new()),
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Table> {
        self.table
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Table> {
        self.table
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Creates a sidecar in `pool` and returns it with its token, the only time the token exists
    /// in clear on our side. Durable before it returns: a token we handed out is never forgotten.
    pub async fn register(
        &self,
        pool: &str,
        description: Option<String>,
        machine: Option<String>,
    ) -> Result<(Arc<Sidecar>, Secret), StoreError> {
        let token = mint_token();
        let record = SidecarRecord {
            id: SidecarId(self.store.next_id()?),
            pool: pool.to_string(),
            token_digest: token.digest(),
            description,
            created_at: self.clock.now(),
            machine,
        };
        self.store.put_sidecar(&record)?;
        self.store.durable().await?;
        let sidecar = Arc::new(Sidecar {
            record,
            seen: Mutex::default(),
        });
        self.write().insert(sidecar.clone());
        Ok((sidecar, token))
    }

    pub fn authenticate(&self, token: &str) -> Option<Arc<Sidecar>> {
        self.read().by_digest.get(&TokenDigest::of(token)).cloned()
    }

    /// Forgets the sidecar: its token stops working at once.
    pub async fn revoke(&self, sidecar: &Sidecar) -> Result<(), StoreError> {
        self.write().remove(sidecar);
        self.store.remove_sidecar(sidecar.id())?;
        self.store.durable().await
    }

    /// Revokes the sidecar with this id, if it is still registered.
    pub async fn revoke_id(&self, id: SidecarId) -> Result<bool, StoreError> {
        let found = self.by_id(id);
        match found {
            Some(s) => {
                self.revoke(&s).await?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Replaces a sidecar's token (`POST /runners/reset_authentication_token`).
    pub async fn rotate(&self, sidecar: &Sidecar) -> Result<Secret, StoreError> {
        let token = mint_token();
        let mut record = sidecar.record.clone();
        record.token_digest = token.digest();
        self.store.put_sidecar(&record)?;
        self.store.durable().await?;
        let mut table = self.write();
        table.remove(sidecar);
        table.insert(Arc::new(Sidecar {
            record,
            seen: Mutex::new(sidecar.lock().clone()),
        }));
        Ok(token)
    }

    /// Remembers what a sidecar said when it asked for a job.
    pub fn note_poll(
        &self,
        sidecar: &Sidecar,
        info: Option<Map<String, Value>>,
        system_id: Option<String>,
    ) {
        let mut seen = sidecar.lock();
        let now = self.clock.now();
        seen.last_poll = Some(now);
        seen.last_seen = Some(now);
        if info.is_some() {
            seen.info = info;
        }
        if system_id.is_some() {
            seen.system_id = system_id;
        }
    }

    /// The `info` block the pool presents to GitLab: that of the sidecar that asked most
    /// recently, with `features` narrowed to what every live sidecar of the pool supports; with
    /// no live sidecar, the last one computed (kept in the store, so that a pool whose machines
    /// are all gone still advertises what they support). At most a second old.
    pub fn pool_info(&self, pool: &str) -> Option<Value> {
        let now = self.clock.now();
        let mut cache = self
            .pool_infos
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((at, info)) = cache.get(pool)
            && now.saturating_sub(*at) < POOL_INFO_TTL_MS
        {
            return info.clone();
        }
        let info = self.compute_pool_info(pool);
        cache.insert(pool.to_string(), (now, info.clone()));
        info
    }

    fn compute_pool_info(&self, pool: &str) -> Option<Value> {
        let key = format!("pool/{pool}/info");
        match self.live_pool_info(pool) {
            Some(info) => {
                if let Ok(bytes) = serde_json::to_vec(&info)
                    && self.store.meta(&key).ok().flatten().as_deref() != Some(bytes.as_slice())
                {
                    let _ = self.store.put_meta(&key, &bytes);
                }
                Some(info)
            }
            None => self
                .store
                .meta(&key)
                .ok()
                .flatten()
                .and_then(|bytes| serde_json::from_slice(&bytes).ok()),
        }
    }

    fn live_pool_info(&self, pool: &str) -> Option<Value> {
        let now = self.clock.now();
        let live: Vec<Seen> = self
            .read()
            .values()
            .filter(|s| s.pool() == pool)
            .map(|s| s.lock().clone())
            .filter(|s| {
                s.last_poll
                    .is_some_and(|t| now.saturating_sub(t) <= LIVE_WINDOW_MS)
            })
            .filter(|s| s.info.is_some())
            .collect();
        let newest = live.iter().max_by_key(|s| s.last_poll)?;
        let mut info = newest.info.clone()?;
        let features: Vec<Map<String, Value>> = live
            .iter()
            .map(|s| {
                s.info
                    .as_ref()
                    .and_then(|i| i.get("features"))
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default()
            })
            .collect();
        if let Some(common) = common_features(features.iter()) {
            info.insert("features".into(), Value::Object(common));
        }
        Some(Value::Object(info))
    }

    /// Notes that the sidecar is alive (it is talking to us).
    pub fn note_seen(&self, sidecar: &Sidecar) {
        sidecar.lock().last_seen = Some(self.clock.now());
    }

    pub fn by_id(&self, id: SidecarId) -> Option<Arc<Sidecar>> {
        self.read().by_id.get(&id).cloned()
    }

    /// The sidecar injected into `machine`, if it is registered.
    pub fn for_machine(&self, machine: &str) -> Option<Arc<Sidecar>> {
        self.read().for_machine(machine).cloned()
    }

    pub fn in_pool(&self, pool: &str) -> Vec<Arc<Sidecar>> {
        let mut list: Vec<_> = self
            .read()
            .values()
            .filter(|s| s.pool() == pool)
            .cloned()
            .collect();
        list.sort_by_key(|s| s.id());
        list
    }
}

/// A runner authentication token in GitLab's shape (`glrt-` prefix, so that `gitlab-runner
/// register --token` takes the verify path), with 192 bits of randomness.
fn mint_token() -> Secret {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";
    let mut rng = rand::rng();
    let body: String = (0..32)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    Secret::new(format!("glrt-{body}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::store::MemoryStore;
    use serde_json::json;

    fn registry() -> (Sidecars, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(1_000_000));
        let sidecars = Sidecars::load(Arc::new(MemoryStore::new()), clock.clone()).unwrap();
        (sidecars, clock)
    }

    fn info(features: Value) -> Option<Map<String, Value>> {
        json!({"name": "gitlab-runner", "executor": "shell", "features": features})
            .as_object()
            .cloned()
    }

    #[tokio::test]
    async fn tokens_authenticate_until_revoked_and_are_glrt_shaped() {
        let (reg, _) = registry();
        let (s, token) = reg.register("default", None, None).await.unwrap();
        assert!(token.expose().starts_with("glrt-"));
        assert_eq!(reg.authenticate(token.expose()).unwrap().id(), s.id());
        assert!(reg.authenticate("glrt-wrong").is_none());
        reg.revoke(&s).await.unwrap();
        assert!(reg.authenticate(token.expose()).is_none());
    }

    #[tokio::test]
    async fn a_machines_sidecar_is_its_newest_one_and_survives_rotation() {
        let (reg, _) = registry();
        let machine = || Some("m-1".to_string());
        let (old, _) = reg.register("p", None, machine()).await.unwrap();
        let (new, _) = reg.register("p", None, machine()).await.unwrap();
        let (_other, _) = reg.register("p", None, Some("m-2".into())).await.unwrap();
        assert_eq!(reg.for_machine("m-1").unwrap().id(), new.id());
        reg.rotate(&new).await.unwrap();
        assert_eq!(reg.for_machine("m-1").unwrap().id(), new.id());
        let rotated = reg.for_machine("m-1").unwrap();
        reg.revoke(&rotated).await.unwrap();
        assert_eq!(reg.for_machine("m-1").unwrap().id(), old.id());
        reg.revoke(&old).await.unwrap();
        assert!(reg.for_machine("m-1").is_none());
        assert!(reg.for_machine("m-2").is_some());
    }

    #[tokio::test]
    async fn rotation_replaces_the_token() {
        let (reg, _) = registry();
        let (s, old) = reg.register("default", None, None).await.unwrap();
        let new = reg.rotate(&s).await.unwrap();
        assert!(reg.authenticate(old.expose()).is_none());
        assert_eq!(reg.authenticate(new.expose()).unwrap().id(), s.id());
    }

    #[tokio::test]
    async fn pool_info_narrows_features_to_live_sidecars() {
        let (reg, clock) = registry();
        let (a, _) = reg.register("p", None, None).await.unwrap();
        let (b, _) = reg.register("p", None, None).await.unwrap();
        let (other, _) = reg.register("q", None, None).await.unwrap();
        assert!(reg.pool_info("p").is_none());
        reg.note_poll(
            &a,
            info(json!({"artifacts": true, "cancel_gracefully": true})),
            None,
        );
        reg.note_poll(&other, info(json!({"artifacts": false})), None);
        clock.advance(std::time::Duration::from_secs(1));
        reg.note_poll(
            &b,
            info(json!({"artifacts": true, "cancel_gracefully": false})),
            None,
        );
        let i = reg.pool_info("p").unwrap();
        assert_eq!(
            i["features"],
            json!({"artifacts": true, "cancel_gracefully": false})
        );
        // Once `b` has been silent past the live window, only `a` speaks for the pool.
        clock.advance(std::time::Duration::from_secs(LIVE_WINDOW_MS / 1000 - 30));
        reg.note_poll(&a, None, None);
        clock.advance(std::time::Duration::from_secs(60));
        let i = reg.pool_info("p").unwrap();
        assert_eq!(
            i["features"],
            json!({"artifacts": true, "cancel_gracefully": true})
        );
    }
}
