//! Putting the sidecar binary on a machine, in one remote command in the usual case: the
//! command creates the sidecar's directory, and then either finds the binary already there
//! with the right checksum (and stops reading: the rest of the stream is not sent) or unpacks
//! the gzip-compressed stream (a sidecar binary shrinks to about a half), checks what arrived
//! on the machine, and only then moves it into place. A machine without `gzip` says so, and
//! gets the binary uncompressed in a second command.

use std::io::Write;

use bytes::Bytes;

use super::{InjectError, Injector, UPLOAD_TIMEOUT};
use crate::ssh::Connection;

/// Exit status of the upload when what arrived has another checksum (printed).
const CORRUPTED: u32 = 3;
/// Exit status of a compressed upload to a machine without `gzip`.
const NO_GZIP: u32 = 5;

impl Injector {
    /// Creates the sidecar's directory (mode 700) and puts the binary there unless the machine
    /// already has it.
    pub(super) async fn install_binary(&self, conn: &Connection) -> Result<(), InjectError> {
        let dir = &self.config.remote_dir;
        let mkdir = format!("mkdir -p {dir}/builds {dir}/bin && chmod 700 {dir}");
        let (Some((local, sum)), Some(remote)) = (&self.binary, self.remote_binary()) else {
            self.run(conn, "creating the sidecar directory", &mkdir, None)
                .await?;
            return Ok(());
        };
        let tmp = format!("{remote}.upload");
        let command = |unpack: &str| {
            format!(
                "{mkdir} || exit 1\n\
                 if echo '{sum}  {remote}' | sha256sum -c - >/dev/null 2>&1; then echo present; exit 0; fi\n\
                 {unpack} > {tmp} && chmod 755 {tmp} && got=$(sha256sum {tmp} | cut -d' ' -f1) || exit 1\n\
                 if [ \"$got\" = {sum} ]; then mv -f {tmp} {remote}; else rm -f {tmp}; echo \"$got\"; exit {CORRUPTED}; fi\n"
            )
        };
        let gzip = format!("command -v gzip >/dev/null || exit {NO_GZIP}; gzip -dc");
        let packed = self.compressed_binary(local).await?;
        let mut out = self.send(conn, &command(&gzip), packed).await?;
        if out.status == Some(NO_GZIP) {
            let raw = Bytes::from(read(local).await?);
            out = self.send(conn, &command("cat"), raw).await?;
        }
        match out.status {
            Some(0) if out.stdout.starts_with(b"present") => {
                tracing::debug!(%remote, "the machine already has the sidecar binary");
                Ok(())
            }
            Some(0) => {
                tracing::debug!(%remote, "sidecar binary uploaded");
                Ok(())
            }
            Some(CORRUPTED) => Err(InjectError::Corrupted {
                expected: sum.clone(),
                got: String::from_utf8_lossy(&out.stdout).trim().to_string(),
            }),
            _ => Err(InjectError::Remote {
                step: "uploading the sidecar binary",
                status: out.status,
                output: out.complaint(),
            }),
        }
    }

    async fn send(
        &self,
        conn: &Connection,
        command: &str,
        bytes: Bytes,
    ) -> Result<crate::ssh::Output, InjectError> {
        Ok(conn.exec(command, Some(bytes), UPLOAD_TIMEOUT).await?)
    }

    /// Compresses the binary in the background now, so that the first machine does not wait
    /// for it (a release sidecar takes a few hundred milliseconds).
    pub fn warm_up(&self) {
        let (Some((local, _)), Ok(runtime)) =
            (self.binary.clone(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let this = self.clone();
        runtime.spawn(async move {
            if let Err(e) = this.compressed_binary(&local).await {
                tracing::warn!(error = %e, "cannot compress the sidecar binary ahead of the first upload");
            }
        });
    }

    /// The binary gzip-compressed, once for every machine (at start-up, by [`Self::warm_up`]),
    /// so at the default level rather than a fast one: every upload is the smaller for it.
    async fn compressed_binary(&self, local: &std::path::Path) -> Result<Bytes, InjectError> {
        let bytes = self
            .compressed
            .get_or_try_init(|| async {
                let raw = read(local).await?;
                let path = local.display().to_string();
                tokio::task::spawn_blocking(move || gzip(&raw))
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|r| r.map_err(|e| e.to_string()))
                    .map(Bytes::from)
                    .map_err(|detail| InjectError::LocalBinary { path, detail })
            })
            .await?;
        Ok(bytes.clone())
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

/// Kept for the service's lifetime: trimmed to its length (the encoder's buffer grew by
/// doubling, up to twice that).
fn gzip(raw: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(raw)?;
    let mut packed = encoder.finish()?;
    packed.shrink_to_fit();
    Ok(packed)
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
