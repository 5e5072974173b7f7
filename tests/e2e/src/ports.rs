//! Loopback ports for a server that a test stops and starts again on the same address.
//!
//! A port the kernel picks for `bind(…:0)` comes from its ephemeral range, the same range it
//! draws the local ports of outgoing connections from. Once the server holding such a port
//! stops, any connection on the machine (another test's client, running in parallel) may be
//! given that port, and the restart then fails with "Address already in use". A port below
//! the range is handed out only to whoever asks for it by number, so it stays free across a
//! restart; below 20000 too, where the local provisioner's machines put their `sshd`
//! (`LOCAL_PORT_RANGE`, 20000-39999 by default).

use anyhow::{Context, Result, bail};
use std::net::TcpListener;

/// The lowest port the kernel hands to outgoing connections (Linux's default when unreadable).
fn ephemeral_floor() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

/// Whether nothing listens on, or is bound to, `port` on 127.0.0.1 now.
pub fn is_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// A loopback port from 10000 up to the ephemeral range or the local machines' `sshd` ports,
/// whichever starts first, free now; from a random starting point so that tests running in
/// parallel rarely try the same one.
pub fn below_ephemeral_range() -> Result<u16> {
    const LOWEST: u16 = 10_000;
    const LOCAL_SSHD_PORTS: u16 = 20_000;
    let floor = ephemeral_floor().min(LOCAL_SSHD_PORTS);
    let Some(span) = floor.checked_sub(LOWEST).filter(|&s| s > 0) else {
        bail!(
            "no room for fixed ports between {LOWEST} and {floor} (the ephemeral range's start or the local machines' sshd ports)"
        );
    };
    let start = rand::random::<u16>() % span;
    (0..span)
        .map(|i| LOWEST + (start + i) % span)
        .find(|&port| is_free(port))
        .with_context(|| format!("no free loopback port between {LOWEST} and {floor}"))
}

/// Two distinct ports as [`below_ephemeral_range`] gives them (each is checked alone, so
/// the second may repeat the first).
pub fn two_below_ephemeral_range() -> Result<[u16; 2]> {
    let first = below_ephemeral_range()?;
    for _ in 0..16 {
        let second = below_ephemeral_range()?;
        if second != first {
            return Ok([first, second]);
        }
    }
    bail!("no second free loopback port below the ephemeral range besides {first}")
}
