//! Putting the sidecar binary on a machine: skipped when the machine already has the right
//! checksum; otherwise sent gzip-compressed (a sidecar binary shrinks to about a third) when
//! the machine has `gzip`, and checked on arrival before it replaces the old one.

use std::io::Write;
use std::sync::Arc;

use super::{COMMAND_TIMEOUT, InjectError, Injector, UPLOAD_TIMEOUT};
use crate::ssh::Connection;

impl Injector {
    /// Uploads the binary unless the machine already has it, and verifies what arrived.
    pub(super) async fn upload(&self, conn: &Connection) -> Result<(), InjectError> {
        let (Some((local, sum)), Some(remote)) = (&self.binary, self.remote_binary()) else {
            return Ok(());
        };
        let present = conn
            .exec(
                &format!("sha256sum {remote} 2>/dev/null; command -v gzip"),
                None,
                COMMAND_TIMEOUT,
            )
            .await?;
        let answer = String::from_utf8_lossy(&present.stdout).to_string();
        if answer.split_whitespace().next() == Some(sum.as_str()) {
            tracing::debug!(%remote, "the machine already has the sidecar binary");
            return Ok(());
        }
        let has_gzip = answer
            .lines()
            .any(|line| line.trim_end().ends_with("/gzip"));
        let tmp = format!("{remote}.upload");
        let (unpack, bytes) = if has_gzip {
            ("gzip -dc", self.compressed_binary(local).await?)
        } else {
            ("cat", Arc::new(read(local).await?))
        };
        let command = format!(
            "mkdir -p {dir}/bin && {unpack} > {tmp} && chmod 755 {tmp} && sha256sum {tmp}",
            dir = self.config.remote_dir
        );
        let mut input: &[u8] = &bytes;
        let out = conn
            .exec(&command, Some(&mut input), UPLOAD_TIMEOUT)
            .await?;
        if !out.success() {
            return Err(InjectError::Remote {
                step: "uploading the sidecar binary",
                status: out.status,
                output: out.complaint(),
            });
        }
        let got = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string();
        if &got != sum {
            let _ = conn
                .exec(&format!("rm -f {tmp}"), None, COMMAND_TIMEOUT)
                .await;
            return Err(InjectError::Corrupted {
                expected: sum.clone(),
                got,
            });
        }
        tracing::debug!(%remote, bytes = bytes.len(), compressed = has_gzip, "sidecar binary uploaded");
        self.run(
            conn,
            "installing the sidecar binary",
            &format!("mv -f {tmp} {remote}"),
            None,
        )
        .await?;
        Ok(())
    }

    /// The binary, gzip-compressed once (fast level: the link, not the CPU, is the limit).
    async fn compressed_binary(
        &self,
        local: &std::path::Path,
    ) -> Result<Arc<Vec<u8>>, InjectError> {
        let bytes = self
            .compressed
            .get_or_try_init(|| async {
                let raw = read(local).await?;
                let path = local.display().to_string();
                tokio::task::spawn_blocking(move || gzip(&raw))
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|r| r.map_err(|e| e.to_string()))
                    .map(Arc::new)
                    .map_err(|detail| InjectError::LocalBinary { path, detail })
            })
            .await?;
        Ok(Arc::clone(bytes))
    }
}

async fn read(local: &std::path::Path) -> Result<Vec<u8>, InjectError> {
    tokio::fs::read(local)
        .await
        .map_err(|e| InjectError::LocalBinary {
            path: local.display().to_string(),
            detail: e.to_string(),
        })
}

fn gzip(raw: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(raw)?;
    encoder.finish()
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    #[test]
    fn gzip_round_trips() {
        let raw: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let packed = super::gzip(&raw).unwrap();
        assert!(packed.len() < raw.len() / 2);
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(&packed[..])
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, raw);
    }
}
