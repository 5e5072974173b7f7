//! Plain-text tables and times for the operator's commands.

/// Columns padded to their widest cell, two spaces apart.
pub fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        padded.join("  ").trim_end().to_string()
    };
    let mut out = vec![line(headers.iter().map(|h| (*h).to_string()).collect())];
    out.extend(rows.into_iter().map(line));
    out.join("\n")
}

fn now_ms() -> u64 {
    use crate::clock::Clock;
    crate::clock::SystemClock.now()
}

/// How long ago `at` (ms since the epoch) was: `42s`, `3m`, `2h`, `5d`.
pub fn age(at: Option<u64>) -> String {
    let Some(at) = at else { return "-".into() };
    let s = now_ms().saturating_sub(at) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// `at` (ms since the epoch) as a UTC time of day with milliseconds.
pub fn clock(at: Option<u64>) -> String {
    let Some(at) = at else { return "-".into() };
    let day_ms = at % 86_400_000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        day_ms / 3_600_000,
        day_ms / 60_000 % 60,
        day_ms / 1000 % 60,
        day_ms % 1000
    )
}
