//! The autoscaler's `/metrics`, read back: series summed by name and a subset of labels.

use std::time::Duration;

use anyhow::{Result, bail};

use crate::stack::Autoscaler;

/// One scrape of `/metrics`.
#[derive(Debug, Clone)]
pub struct Scrape {
    pub text: String,
}

impl Scrape {
    pub async fn get(autoscaler: &Autoscaler) -> Result<Self> {
        let text = autoscaler
            .admin_get("/metrics")
            .send()
            .await?
            .error_for_status()?
            .text()
            .await?;
        Ok(Self { text })
    }

    /// The sum of every series `name` whose labels include all of `labels`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (series, value) = l.rsplit_once(' ')?;
                let (series_name, series_labels) = match series.split_once('{') {
                    Some((n, rest)) => (n, rest.trim_end_matches('}')),
                    None => (series, ""),
                };
                let matches = series_name == name
                    && labels.iter().all(|(k, v)| {
                        series_labels
                            .split(',')
                            .any(|p| p == format!("{k}=\"{v}\""))
                    });
                matches.then(|| value.parse::<f64>().ok()).flatten()
            })
            .sum()
    }

    /// Whether any series of `name` is there.
    pub fn has(&self, name: &str) -> bool {
        self.text
            .lines()
            .any(|l| l.starts_with(name) && !l.starts_with('#'))
    }
}

/// Scrapes until `done` holds (the machine histograms are read from the machines' timelines
/// a moment after each change), failing with the last scrape after `within`.
pub async fn wait_for(
    autoscaler: &Autoscaler,
    within: Duration,
    what: &str,
    done: impl Fn(&Scrape) -> bool,
) -> Result<Scrape> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let scrape = Scrape::get(autoscaler).await?;
        if done(&scrape) {
            return Ok(scrape);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "{what}: not reached within {within:?}; metrics:\n{}",
                scrape.text
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
