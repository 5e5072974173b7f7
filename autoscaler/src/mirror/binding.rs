//! A sidecar token minted for a machine opens the mirrored API only from that machine's
//! address (as its provisioner reported it) or the pool's `token_networks`: job code on another
//! machine that got hold of the token gets `403` and nothing else. Each refused (machine,
//! address) pair is logged once. Before the provider has said where the machine is, its token
//! is not yet accepted from anywhere but `token_networks` ([`ApiError::AddressNotYetKnown`]).

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::Duration;

use super::{ApiError, App};
use crate::config::TokenBinding;
use crate::sidecars::Sidecar;

/// The longest a machine's host name may take to resolve.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// Refused pairs remembered for logging once; past this many the memory starts over (a flood
/// of addresses must not grow it without bound).
const REMEMBERED_REFUSALS: usize = 4096;

/// The (machine, address) pairs already logged as refused.
#[derive(Debug, Default)]
pub struct Refusals(Mutex<HashSet<(String, IpAddr)>>);

impl Refusals {
    /// Whether this is the first refusal of `address` for `machine` (and so worth a log line).
    fn first(&self, machine: &str, address: IpAddr) -> bool {
        let mut seen = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if seen.len() >= REMEMBERED_REFUSALS {
            seen.clear();
        }
        seen.insert((machine.to_string(), address))
    }
}

/// Refuses `sidecar`'s token when it comes from an address its machine's binding does not
/// allow. Sidecars that registered themselves (static pools) have no machine and are not bound.
pub async fn check_source(
    app: &App,
    sidecar: &Sidecar,
    peer: Option<SocketAddr>,
) -> Result<(), ApiError> {
    let Some(machine) = &sidecar.record.machine else {
        return Ok(());
    };
    let binding = app
        .pool(sidecar.pool())?
        .config
        .sidecar
        .as_ref()
        .map(|s| s.token_binding.clone())
        .unwrap_or_default();
    if binding == TokenBinding::Off {
        return Ok(());
    }
    let host = app
        .machines
        .get(sidecar.pool())
        .and_then(|m| m.get(machine))
        .and_then(|r| r.endpoint)
        .map(|e| e.host);
    let addresses = match &host {
        Some(h) => resolve(h).await,
        None => Vec::new(),
    };
    let allowed = peer.is_some_and(|p| binding.allows(&addresses, p.ip()));
    if allowed {
        return Ok(());
    }
    if host.is_none() {
        return Err(ApiError::AddressNotYetKnown);
    }
    let address = peer.map(|p| p.ip().to_canonical());
    let unspecified = IpAddr::from([0, 0, 0, 0]);
    if app.refusals.first(machine, address.unwrap_or(unspecified)) {
        tracing::warn!(
            machine.id = %machine,
            address = ?address,
            machine.address = ?host,
            "sidecar token used from an address that is not its machine's: refused"
        );
    }
    Err(ApiError::WrongSource)
}

/// The addresses of a machine's host: itself when it is an address, else what it resolves to.
async fn resolve(host: &str) -> Vec<IpAddr> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return vec![ip];
    }
    match tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((host, 0))).await {
        Ok(Ok(found)) => found.map(|a| a.ip()).collect(),
        Ok(Err(e)) => {
            tracing::warn!(host, error = %e, "cannot resolve a machine's host name");
            Vec::new()
        }
        Err(_) => {
            tracing::warn!(host, "resolving a machine's host name timed out");
            Vec::new()
        }
    }
}
