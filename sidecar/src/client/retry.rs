//! HTTP-level retry decisions (runner-protocol.md §1.1), free of IO so they can be tested:
//! which statuses are retried, and how long to wait before the next attempt.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Retry policy of every API call: 5 attempts in total; the wait comes from
/// `RateLimit-ResetTime`, then `Retry-After`, then exponential backoff with jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts including the first.
    pub max_attempts: u32,
    /// First backoff step.
    pub base: Duration,
    /// No single wait is longer than this.
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            base: Duration::from_millis(100),
            cap: Duration::from_secs(60),
        }
    }
}

/// Statuses retried at the HTTP level (§1.1): 408, 429, 500, 502, 503, 504 and ≥ 512.
/// Notably not 501 and 505–511.
pub fn is_retriable_status(status: u16) -> bool {
    matches!(status, 408 | 429 | 500 | 502 | 503 | 504) || status >= 512
}

impl RetryPolicy {
    /// Wait before the attempt following failed attempt number `attempt` (1-based).
    ///
    /// `jitter` is a random number in `[0, 1)` supplied by the caller (so tests are
    /// deterministic): the backoff is drawn between `base` and the exponential value.
    /// A `RateLimit-ResetTime` in the future wins, then an integer `Retry-After`; header
    /// values are capped like the backoff so a broken proxy cannot park the runner.
    pub fn wait(
        &self,
        attempt: u32,
        rate_limit_reset: Option<&str>,
        retry_after: Option<&str>,
        now: SystemTime,
        jitter: f64,
    ) -> Duration {
        if let Some(reset) = rate_limit_reset.and_then(parse_http_date)
            && let Ok(until) = reset.duration_since(now)
            && !until.is_zero()
        {
            return until.min(self.cap);
        }
        if let Some(secs) = retry_after.and_then(|v| v.trim().parse::<u64>().ok()) {
            return Duration::from_secs(secs).min(self.cap);
        }
        self.backoff(attempt, jitter)
    }

    /// Exponential backoff: base × 2^(attempt−1), capped, with jitter between base and it.
    pub fn backoff(&self, attempt: u32, jitter: f64) -> Duration {
        let exp = attempt.saturating_sub(1).min(30);
        let full = self.base.saturating_mul(1u32 << exp).min(self.cap);
        let jitter = jitter.clamp(0.0, 1.0);
        let spread = full.saturating_sub(self.base);
        self.base + spread.mul_f64(jitter)
    }
}

/// Parse an RFC 1123 HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`), the format of
/// `RateLimit-ResetTime`. Returns `None` for anything else.
pub fn parse_http_date(value: &str) -> Option<SystemTime> {
    let value = value.trim();
    let (_weekday, rest) = value.split_once(", ")?;
    let mut parts = rest.split_ascii_whitespace();
    let day: u32 = parts.next()?.parse().ok()?;
    let month = match parts.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i64 = parts.next()?.parse().ok()?;
    let mut hms = parts.next()?.split(':');
    let hour: u64 = hms.next()?.parse().ok()?;
    let minute: u64 = hms.next()?.parse().ok()?;
    let second: u64 = hms.next()?.parse().ok()?;
    if parts.next()? != "GMT" || parts.next().is_some() || hms.next().is_some() {
        return None;
    }
    if !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 || year < 1970 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let secs = u64::try_from(days).ok()? * 86_400 + hour * 3600 + minute * 60 + second;
    Some(UNIX_EPOCH + Duration::from_secs(secs))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Inverse of [`days_from_civil`]: (year, month, day).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retriable_statuses() {
        for s in [408, 429, 500, 502, 503, 504, 512, 520, 599] {
            assert!(is_retriable_status(s), "{s}");
        }
        for s in [
            200, 201, 400, 401, 403, 404, 409, 412, 416, 501, 505, 507, 511,
        ] {
            assert!(!is_retriable_status(s), "{s}");
        }
    }

    #[test]
    fn http_date_parsing() {
        let t = parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(t.duration_since(UNIX_EPOCH).unwrap().as_secs(), 784_111_777);
        let t = parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        assert_eq!(
            t.duration_since(UNIX_EPOCH).unwrap().as_secs(),
            1_445_412_480
        );
        assert!(parse_http_date("garbage").is_none());
        assert!(parse_http_date("Wed, 21 Foo 2015 07:28:00 GMT").is_none());
        assert!(parse_http_date("Wed, 21 Oct 2015 07:28:00 CET").is_none());
        assert!(parse_http_date("1445412480").is_none());
    }

    #[test]
    fn civil_roundtrip() {
        for days in [-1000, 0, 1, 59, 365, 10_957, 19_000, 40_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
    }

    #[test]
    fn wait_prefers_rate_limit_reset_then_retry_after_then_backoff() {
        let p = RetryPolicy::default();
        let now = UNIX_EPOCH + Duration::from_secs(1_445_412_470);
        let reset = "Wed, 21 Oct 2015 07:28:00 GMT"; // now + 10 s
        assert_eq!(
            p.wait(1, Some(reset), Some("3"), now, 0.5),
            Duration::from_secs(10)
        );
        // A reset time in the past is ignored.
        let later = now + Duration::from_secs(100);
        assert_eq!(
            p.wait(1, Some(reset), Some("3"), later, 0.5),
            Duration::from_secs(3)
        );
        // Retry-After must be an integer number of seconds.
        assert_eq!(
            p.wait(1, None, Some("soon"), now, 1.0),
            Duration::from_millis(100)
        );
        assert_eq!(p.wait(1, None, Some("7"), now, 0.0), Duration::from_secs(7));
        // Header values are capped at 60 s.
        assert_eq!(
            p.wait(1, None, Some("3600"), now, 0.0),
            Duration::from_secs(60)
        );
    }

    #[test]
    fn backoff_doubles_with_jitter_and_cap() {
        let p = RetryPolicy::default();
        assert_eq!(p.backoff(1, 1.0), Duration::from_millis(100));
        assert_eq!(p.backoff(2, 1.0), Duration::from_millis(200));
        assert_eq!(p.backoff(3, 1.0), Duration::from_millis(400));
        assert_eq!(p.backoff(4, 1.0), Duration::from_millis(800));
        assert_eq!(p.backoff(4, 0.0), Duration::from_millis(100));
        assert_eq!(p.backoff(4, 0.5), Duration::from_millis(450));
        assert_eq!(p.backoff(20, 1.0), Duration::from_secs(60));
        assert_eq!(p.backoff(200, 1.0), Duration::from_secs(60));
    }
}
