//! The runner's system id (runner-protocol.md §2): `s_` and 12 characters derived from the
//! machine id, or `r_` and 12 random ones, kept in a file so that it survives restarts.

use std::path::Path;

use sha2::{Digest, Sha256};

/// `s_`/`r_` + 12 alphanumerics (§2).
pub fn is_valid_system_id(value: &str) -> bool {
    (value.starts_with("s_") || value.starts_with("r_"))
        && value.len() == 14
        && value[2..].chars().all(|c| c.is_ascii_alphanumeric())
}

/// `s_` + 12 hex derived from the machine id (hashed, so the id itself is not revealed),
/// or `r_` + 12 random alphanumerics when there is no machine id.
pub fn generate_system_id(machine_id: Option<&str>) -> String {
    match machine_id.map(str::trim).filter(|m| !m.is_empty()) {
        Some(m) => {
            let digest = Sha256::digest(format!("{}:{m}", crate::NAME).as_bytes());
            format!("s_{}", &hex::encode(digest)[..12])
        }
        None => {
            use rand::RngExt;
            use rand::distr::Alphanumeric;
            let suffix: String = rand::rng()
                .sample_iter(Alphanumeric)
                .take(12)
                .map(char::from)
                .collect();
            format!("r_{suffix}")
        }
    }
}

/// Read the system id from `path`, or generate and persist one.
pub fn load_or_create_system_id(path: &Path) -> std::io::Result<String> {
    if let Ok(existing) = std::fs::read_to_string(path) {
        let existing = existing.trim();
        if is_valid_system_id(existing) {
            return Ok(existing.to_owned());
        }
    }
    let machine_id = ["/etc/machine-id", "/var/lib/dbus/machine-id"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok());
    let id = generate_system_id(machine_id.as_deref());
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, format!("{id}\n"))?;
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_id_format() {
        let s = generate_system_id(Some("0123456789abcdef0123456789abcdef\n"));
        assert!(s.starts_with("s_") && is_valid_system_id(&s), "{s}");
        assert_eq!(
            s,
            generate_system_id(Some("0123456789abcdef0123456789abcdef"))
        );
        let r = generate_system_id(None);
        assert!(r.starts_with("r_") && is_valid_system_id(&r), "{r}");
        assert!(!is_valid_system_id("x_123456789012"));
        assert!(!is_valid_system_id("s_123"));
        assert!(!is_valid_system_id("s_12345678901-"));
    }

    #[test]
    fn system_id_is_persisted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/.runner_system_id");
        let a = load_or_create_system_id(&path).unwrap();
        let b = load_or_create_system_id(&path).unwrap();
        assert_eq!(a, b);
        assert!(is_valid_system_id(&a));
        std::fs::write(&path, "garbage").unwrap();
        let c = load_or_create_system_id(&path).unwrap();
        assert!(is_valid_system_id(&c));
    }
}
