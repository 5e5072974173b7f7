//! Parsers for the value kinds the configuration uses beyond plain serde types.

use std::time::Duration;

use figment::value::Value;

use super::reader::Section;

/// A duration: a humantime string (`"30s"`, `"5m"`, `"1h 30m"`) or a whole number of seconds.
pub fn duration(value: &Value) -> Result<Duration, String> {
    if let Some(n) = value.to_u128() {
        return u64::try_from(n)
            .map(Duration::from_secs)
            .map_err(|_| "is too large".to_string());
    }
    match value.as_str() {
        Some(s) => humantime::parse_duration(s.trim())
            .map_err(|e| format!("is not a duration like \"30s\" or \"5m\" ({e})")),
        None => Err("must be a duration like \"30s\" or a number of seconds".into()),
    }
}

/// A byte size: a whole number of bytes or a string with a unit (`"512KiB"`, `"1MiB"`, `"2GiB"`,
/// `"1MB"`).
pub fn byte_size(value: &Value) -> Result<u64, String> {
    if let Some(n) = value.to_u128() {
        return u64::try_from(n).map_err(|_| "is too large".to_string());
    }
    let Some(s) = value.as_str() else {
        return Err("must be a size like \"1MiB\" or a number of bytes".into());
    };
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("is not a size like \"1MiB\" (got {s:?})"))?;
    let factor: u64 = match unit.trim() {
        "" | "B" => 1,
        "KB" => 1000,
        "KiB" => 1 << 10,
        "MB" => 1000 * 1000,
        "MiB" => 1 << 20,
        "GB" => 1000 * 1000 * 1000,
        "GiB" => 1 << 30,
        other => {
            return Err(format!(
                "has an unknown unit {other:?} (use B, KiB, MiB, GiB)"
            ));
        }
    };
    n.checked_mul(factor)
        .ok_or_else(|| "is too large".to_string())
}

/// An `http` or `https` URL without query or fragment.
pub fn http_url(value: &Value) -> Result<url::Url, String> {
    let Some(s) = value.as_str() else {
        return Err("must be a URL string".into());
    };
    let url = url::Url::parse(s).map_err(|e| format!("is not a valid URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("must use http or https, not {:?}", url.scheme()));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("must not have a query or fragment".into());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("must name a host".into());
    }
    Ok(url)
}

/// A pool name: used in metrics labels, log fields and environment override keys, so it is kept
/// to a portable alphabet.
pub fn pool_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a valid pool name (1-63 of a-z 0-9 - _, starting with a letter or digit)"
        ))
    }
}

/// The duration at `key`, or `default` when it is absent (a value that does not parse is reported
/// by `parsed` and the default used).
pub(super) fn duration_or(s: &Section<'_>, key: &str, default: Duration) -> Duration {
    s.parsed(key, duration).unwrap_or(default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration(&Value::from(30u32)), Ok(Duration::from_secs(30)));
        assert_eq!(duration(&Value::from("5m")), Ok(Duration::from_secs(300)));
        assert_eq!(
            duration(&Value::from("1h 30m")),
            Ok(Duration::from_secs(5400))
        );
        assert!(duration(&Value::from("soon")).is_err());
        assert!(duration(&Value::from(true)).is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(byte_size(&Value::from(10u32)), Ok(10));
        assert_eq!(byte_size(&Value::from("1MiB")), Ok(1 << 20));
        assert_eq!(byte_size(&Value::from("32 KiB")), Ok(32 << 10));
        assert!(byte_size(&Value::from("1PB")).is_err());
        assert!(byte_size(&Value::from("MiB")).is_err());
    }

    #[test]
    fn urls() {
        assert!(http_url(&Value::from("https://gitlab.example.com")).is_ok());
        assert!(http_url(&Value::from("https://h/gitlab/")).is_ok());
        assert!(http_url(&Value::from("ftp://h")).is_err());
        assert!(http_url(&Value::from("not a url")).is_err());
        assert!(http_url(&Value::from("https://h/?a=b")).is_err());
    }

    #[test]
    fn pool_names() {
        assert!(pool_name("default").is_ok());
        assert!(pool_name("linux-x86_64").is_ok());
        assert!(pool_name("").is_err());
        assert!(pool_name("Big").is_err());
        assert!(pool_name("-x").is_err());
        assert!(pool_name("a.b").is_err());
    }
}
