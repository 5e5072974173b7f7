//! `pools[].sidecar.token_binding` and `token_networks`: from where a machine's sidecar token is
//! accepted. Job code on any machine can reach the mirrored API; a token it steals is useless
//! from anywhere but the machine it was minted for.

use std::net::IpAddr;

use ipnet::IpNet;

use super::reader::Section;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenBinding {
    /// Accepted from the machine's address as its provisioner reported it, or from `networks`
    /// (for machines whose connections reach the autoscaler through NAT).
    Machine { networks: Vec<IpNet> },
    /// Accepted from anywhere.
    Off,
}

impl Default for TokenBinding {
    fn default() -> Self {
        TokenBinding::Machine {
            networks: Vec::new(),
        }
    }
}

impl TokenBinding {
    /// Whether a request from `peer` may use the token of a machine reached at `machine`
    /// (its addresses, already resolved).
    pub fn allows(&self, machine: &[IpAddr], peer: IpAddr) -> bool {
        let peer = peer.to_canonical();
        match self {
            TokenBinding::Off => true,
            TokenBinding::Machine { networks } => {
                machine.iter().any(|m| m.to_canonical() == peer)
                    || networks.iter().any(|n| n.contains(&peer))
            }
        }
    }
}

pub(super) fn read_token_binding(s: &Section<'_>) -> TokenBinding {
    let mode: String = s.or("token_binding", "machine".to_string());
    let listed: Vec<String> = s.or("token_networks", Vec::new());
    let mut networks = Vec::new();
    for text in &listed {
        let parsed = text
            .parse::<IpNet>()
            .or_else(|_| text.parse::<IpAddr>().map(IpNet::from));
        match parsed {
            Ok(n) => networks.push(n.trunc()),
            Err(_) => s.problem(
                "token_networks",
                format!("{text:?} is not a network (10.0.0.0/8) or an address"),
            ),
        }
    }
    match mode.as_str() {
        "machine" => TokenBinding::Machine { networks },
        "off" => {
            if !listed.is_empty() {
                s.problem(
                    "token_networks",
                    "does not apply with token_binding = \"off\"",
                );
            }
            TokenBinding::Off
        }
        other => {
            s.problem(
                "token_binding",
                format!("{other:?} is not one of machine, off"),
            );
            TokenBinding::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_machine_token_is_allowed_from_its_address_or_a_listed_network_only() {
        let only = TokenBinding::default();
        assert!(only.allows(&[ip("203.0.113.7")], ip("203.0.113.7")));
        assert!(only.allows(&[ip("203.0.113.7")], ip("::ffff:203.0.113.7")));
        assert!(!only.allows(&[ip("203.0.113.7")], ip("203.0.113.8")));
        assert!(!only.allows(&[], ip("203.0.113.7")));
        let nat = TokenBinding::Machine {
            networks: vec!["10.0.0.0/8".parse().unwrap()],
        };
        assert!(nat.allows(&[ip("203.0.113.7")], ip("10.1.2.3")));
        assert!(!nat.allows(&[ip("203.0.113.7")], ip("11.0.0.1")));
        assert!(TokenBinding::Off.allows(&[], ip("198.51.100.1")));
    }
}
