//! An in-memory provisioner for tests of the machine lifecycle: machines are map entries, and
//! the test can make calls fail, hang or lose machines.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use futures::future::BoxFuture;

use super::{
    Capabilities, CreateRequest, Created, Destroyed, Info, Interruption, Labels, ListedMachine,
    Provisioner, ProvisionerError, Result, StartAnswer, Status, StopAnswer,
};
use crate::core::reconcile::ProviderState;

#[derive(Debug, Clone)]
pub struct FakeMachine {
    pub key: String,
    pub labels: Labels,
    pub state: ProviderState,
    /// Set by [`FakeProvisioner::reclaim`].
    pub interruption: Option<Interruption>,
    /// The machine's own user-data, as a provider would hand it to the machine at boot.
    pub user_data: Option<crate::secret::Secret>,
}

#[derive(Debug, Default)]
struct State {
    machines: BTreeMap<String, FakeMachine>,
    next: u64,
    create_failures: VecDeque<ProvisionerError>,
    destroy_failures: VecDeque<ProvisionerError>,
    list_failures: VecDeque<ProvisionerError>,
    /// New machines start `running` (else `creating` until `set_state`).
    start_running: bool,
    /// `info` does not declare `machine_user_data`, as a provisioner that ignores each
    /// machine's own user-data.
    without_machine_user_data: bool,
    /// `info` does not declare `stop_start`, as a provisioner that cannot stop machines.
    without_stop_start: bool,
    creates: u64,
    destroys: u64,
}

#[derive(Debug, Default)]
pub struct FakeProvisioner {
    state: Mutex<State>,
}

impl FakeProvisioner {
    pub fn new(start_running: bool) -> Self {
        let p = Self::default();
        p.lock().start_running = start_running;
        p
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// `info` stops declaring `stop_start`.
    pub fn drop_stop_start(&self) {
        self.lock().without_stop_start = true;
    }

    /// `info` stops declaring `machine_user_data`.
    pub fn drop_machine_user_data(&self) {
        self.lock().without_machine_user_data = true;
    }

    pub fn fail_creates(&self, errors: impl IntoIterator<Item = ProvisionerError>) {
        self.lock().create_failures.extend(errors);
    }

    pub fn fail_destroys(&self, errors: impl IntoIterator<Item = ProvisionerError>) {
        self.lock().destroy_failures.extend(errors);
    }

    pub fn fail_lists(&self, errors: impl IntoIterator<Item = ProvisionerError>) {
        self.lock().list_failures.extend(errors);
    }

    pub fn set_state(&self, id: &str, state: ProviderState) {
        if let Some(m) = self.lock().machines.get_mut(id) {
            m.state = state;
        }
    }

    /// Announces that the provider takes the machine back (a spot reclaim), as `list` and
    /// `status` then report it.
    pub fn reclaim(&self, id: &str) {
        if let Some(m) = self.lock().machines.get_mut(id) {
            m.interruption = Some(Interruption {
                reason: "spot_reclaim".into(),
                deadline: None,
            });
        }
    }

    /// Makes a machine vanish, as a spot reclaim or an operator would.
    pub fn lose(&self, id: &str) {
        self.lock().machines.remove(id);
    }

    /// Adds a machine nobody asked this autoscaler for (an orphan if it carries our labels).
    pub fn insert(&self, id: &str, labels: Labels, state: ProviderState) {
        self.lock().machines.insert(
            id.to_string(),
            FakeMachine {
                key: labels.get("autoscaler-key").cloned().unwrap_or_default(),
                labels,
                state,
                interruption: None,
                user_data: None,
            },
        );
    }

    pub fn machines(&self) -> BTreeMap<String, FakeMachine> {
        self.lock().machines.clone()
    }

    /// (create calls, destroy calls) made so far.
    pub fn calls(&self) -> (u64, u64) {
        let s = self.lock();
        (s.creates, s.destroys)
    }
}

impl Provisioner for FakeProvisioner {
    fn info(&self) -> BoxFuture<'_, Result<Info>> {
        Box::pin(async {
            let (machine_user_data, stop_start) = {
                let s = self.lock();
                (!s.without_machine_user_data, !s.without_stop_start)
            };
            Ok(Info {
                protocol: 1,
                name: "fake".into(),
                version: "1".into(),
                capabilities: Capabilities {
                    batch_create: true,
                    max_batch: Some(5),
                    host_key: false,
                    machine_user_data,
                    stop_start,
                },
            })
        })
    }

    fn create(&self, request: CreateRequest) -> BoxFuture<'_, Result<Vec<Created>>> {
        Box::pin(async move {
            let mut s = self.lock();
            s.creates += 1;
            if let Some(e) = s.create_failures.pop_front() {
                return Err(e);
            }
            let state = if s.start_running {
                ProviderState::Running
            } else {
                ProviderState::Creating
            };
            let mut created = Vec::new();
            for item in request.machines {
                let existing = s
                    .machines
                    .iter()
                    .find(|(_, m)| m.key == item.key)
                    .map(|(id, m)| (id.clone(), m.state));
                let (id, state) = match existing {
                    Some(found) => found,
                    None => {
                        s.next += 1;
                        let id = format!("fake-{}", s.next);
                        s.machines.insert(
                            id.clone(),
                            FakeMachine {
                                key: item.key.clone(),
                                labels: item.labels,
                                state,
                                interruption: None,
                                user_data: item.user_data,
                            },
                        );
                        (id, state)
                    }
                };
                created.push(Created {
                    key: item.key,
                    id,
                    state,
                });
            }
            Ok(created)
        })
    }

    fn list(&self, labels: Labels) -> BoxFuture<'_, Result<Vec<ListedMachine>>> {
        Box::pin(async move {
            let mut s = self.lock();
            if let Some(e) = s.list_failures.pop_front() {
                return Err(e);
            }
            Ok(s.machines
                .iter()
                .filter(|(_, m)| labels.iter().all(|(k, v)| m.labels.get(k) == Some(v)))
                .map(|(id, m)| ListedMachine {
                    id: id.clone(),
                    state: m.state,
                    labels: m.labels.clone(),
                    interruption: m.interruption.clone(),
                })
                .collect())
        })
    }

    fn status<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Status>> {
        Box::pin(async move {
            let s = self.lock();
            let (state, labels, interruption) = s
                .machines
                .get(id)
                .map_or((ProviderState::Gone, Labels::new(), None), |m| {
                    (m.state, m.labels.clone(), m.interruption.clone())
                });
            Ok(Status {
                id: id.to_string(),
                state,
                address: (state == ProviderState::Running).then(|| "127.0.0.1".to_string()),
                port: 22,
                user: "root".into(),
                host_key: None,
                labels,
                message: None,
                interruption,
            })
        })
    }

    fn destroy<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Destroyed>> {
        Box::pin(async move {
            let mut s = self.lock();
            s.destroys += 1;
            if let Some(e) = s.destroy_failures.pop_front() {
                return Err(e);
            }
            s.machines.remove(id);
            Ok(Destroyed::Gone)
        })
    }

    fn stop<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<StopAnswer>> {
        Box::pin(async move {
            let mut s = self.lock();
            let Some(m) = s.machines.get_mut(id) else {
                return Ok(StopAnswer::Gone);
            };
            match m.state {
                ProviderState::Running | ProviderState::Starting | ProviderState::Stopped => {
                    m.state = ProviderState::Stopped;
                    Ok(StopAnswer::Stopped)
                }
                other => Err(refused_in("stop", id, other)),
            }
        })
    }

    fn start<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<StartAnswer>> {
        Box::pin(async move {
            let mut s = self.lock();
            let start_running = s.start_running;
            let Some(m) = s.machines.get_mut(id) else {
                return Ok(StartAnswer::Gone);
            };
            match m.state {
                ProviderState::Stopped if start_running => {
                    m.state = ProviderState::Running;
                    Ok(StartAnswer::Running)
                }
                // Comes up when the test says so (`set_state`), as a slow machine would.
                ProviderState::Stopped | ProviderState::Starting => {
                    m.state = ProviderState::Starting;
                    Ok(StartAnswer::Starting)
                }
                ProviderState::Running => Ok(StartAnswer::Running),
                other => Err(refused_in("start", id, other)),
            }
        })
    }
}

/// Why the fake refuses a power verb in `state`: a machine on its way somewhere else may be
/// asked again later; a failed one never.
fn refused_in(verb: &str, id: &str, state: ProviderState) -> ProvisionerError {
    let message = format!("cannot {verb} {id} while it is {state:?}");
    match state {
        ProviderState::Failed => ProvisionerError::Permanent { message },
        _ => ProvisionerError::RetryLater {
            message,
            retry_after: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_running_machine() -> (FakeProvisioner, String) {
        let p = FakeProvisioner::new(true);
        p.insert(
            "fake-9",
            Labels::from([("a".into(), "b".into())]),
            ProviderState::Running,
        );
        (p, "fake-9".into())
    }

    #[tokio::test]
    async fn a_stopped_machine_keeps_its_id_and_labels_and_starts_again() {
        let (p, id) = one_running_machine();
        assert_eq!(p.stop(&id).await.unwrap(), StopAnswer::Stopped);
        assert_eq!(p.stop(&id).await.unwrap(), StopAnswer::Stopped, "a no-op");
        let status = p.status(&id).await.unwrap();
        assert_eq!(status.state, ProviderState::Stopped);
        assert_eq!(status.address, None);
        assert_eq!(status.labels.get("a").map(String::as_str), Some("b"));
        assert_eq!(p.start(&id).await.unwrap(), StartAnswer::Running);
        assert_eq!(p.start(&id).await.unwrap(), StartAnswer::Running, "a no-op");
        assert!(p.status(&id).await.unwrap().address.is_some());
    }

    #[tokio::test]
    async fn a_stopped_machine_can_be_destroyed_and_unknown_ids_are_gone() {
        let (p, id) = one_running_machine();
        p.stop(&id).await.unwrap();
        assert_eq!(p.destroy(&id).await.unwrap(), Destroyed::Gone);
        assert_eq!(p.stop(&id).await.unwrap(), StopAnswer::Gone);
        assert_eq!(p.start(&id).await.unwrap(), StartAnswer::Gone);
    }

    #[tokio::test]
    async fn power_verbs_on_a_machine_in_between_are_refused_by_kind() {
        let (p, id) = one_running_machine();
        p.set_state(&id, ProviderState::Creating);
        assert!(matches!(
            p.stop(&id).await,
            Err(ProvisionerError::RetryLater { .. })
        ));
        p.set_state(&id, ProviderState::Failed);
        assert!(p.start(&id).await.unwrap_err().is_permanent());
    }
}
