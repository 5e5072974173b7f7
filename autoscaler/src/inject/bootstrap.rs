//! The bootstrap script a machine runs at boot (its user-data) when its pool's sidecars start
//! without SSH (`[pools.sidecar] start = "user_data"`): the same steps as an injection over SSH
//! (ready command, binary, token and configuration files, CA bundle, detached start), written
//! as one POSIX shell script.
//!
//! The binary is fetched from the autoscaler itself (`GET /autoscaler/v1/sidecar-binary/{sha256}`
//! on the mirrored API): the machine must reach that address anyway for its sidecar to poll, so
//! no other network path or storage is needed, and the version always matches the autoscaler.
//! The SHA-256 travels inside the script, which the provider delivers out of band, so a
//! download over plain HTTP is still checked against what the autoscaler meant to send. A
//! machine that already holds a binary with that checksum (a reused image) skips the download.

use base64::Engine;

use super::recipe::{self, Launch};
use super::{InjectError, Injector};
use crate::secret::Secret;

/// The path under which the mirrored API serves a sidecar binary, by its SHA-256.
pub const BINARY_PATH: &str = "/autoscaler/v1/sidecar-binary";

/// What the script must fetch: the URL and the expected SHA-256 of the binary, and where it goes.
#[derive(Debug, Clone)]
pub struct Download<'a> {
    pub url: &'a str,
    pub sha256: &'a str,
    pub dest: &'a str,
}

/// Everything the script holds besides the launch itself.
#[derive(Debug, Clone, Default)]
pub struct Extras<'a> {
    pub ready_command: Option<&'a str>,
    pub download: Option<Download<'a>>,
    /// The relay's CA certificates (TLS only) and the system CA files to append.
    pub ca: Option<(&'a str, &'a [String])>,
}

/// `printf … | base64 -d`: prints `contents`, which travel base64-encoded so that nothing in
/// them (quotes, heredoc markers) can change the script, and only through shell builtins, so
/// that they never appear on a command line.
pub(super) fn decoded(contents: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(contents);
    format!("printf '%s' '{encoded}' | base64 -d")
}

/// Writes `contents` to `path` with `mode`.
pub(super) fn write_file(path: &str, mode: u32, contents: &str) -> String {
    format!("{} > {path} && chmod {mode:o} {path}\n", decoded(contents))
}

/// The bootstrap script for one machine. `files` are [`recipe::files`] (the token among them).
pub fn script(l: &Launch<'_>, files: &[(&str, u32, String)], extras: &Extras<'_>) -> String {
    let dir = l.dir;
    let mut s = format!(
        "#!/bin/sh\n\
         # Written by the autoscaler for machine {name}: installs and starts its sidecar.\n\
         set -eu\n\
         umask 077\n\
         cd \"${{HOME:-/root}}\"\n\
         mkdir -p {dir}/builds {dir}/bin && chmod 700 {dir}\n\
         exec >> {dir}/bootstrap.log 2>&1\n",
        name = l.name.replace('\n', " "),
    );
    if let Some(ready) = extras.ready_command {
        s.push_str(&format!(
            "if ! sh -c {}; then echo 'the ready command failed; the sidecar is not started'; exit 1; fi\n",
            recipe::quote(ready)
        ));
    }
    if let Some(user) = l.job_user {
        // Job scripts run as this user, away from the sidecar's token (as over SSH).
        s.push_str(&format!(
            "sh -c {} || exit 1\n",
            recipe::quote(&recipe::ensure_job_user(user))
        ));
    }
    if let Some(d) = &extras.download {
        let (dest, sum) = (d.dest, d.sha256);
        s.push_str(&format!(
            "if ! echo '{sum}  {dest}' | sha256sum -c - >/dev/null 2>&1; then\n\
             \x20 if command -v curl >/dev/null; then\n\
             \x20   curl -fsS --retry 30 --retry-connrefused --retry-delay 1 --max-time 600 -o {dest}.part {url}\n\
             \x20 else\n\
             \x20   wget -q -t 30 -T 600 -O {dest}.part {url}\n\
             \x20 fi\n\
             \x20 echo '{sum}  {dest}.part' | sha256sum -c - >/dev/null || {{ echo 'the downloaded sidecar binary has the wrong checksum'; exit 1; }}\n\
             \x20 chmod 755 {dest}.part && mv -f {dest}.part {dest}\n\
             fi\n",
            url = recipe::quote(d.url),
        ));
    }
    for (file, mode, contents) in files {
        s.push_str(&write_file(&format!("{dir}/{file}"), *mode, contents));
    }
    if let Some((pem, system)) = extras.ca {
        s.push_str(&format!(
            "{} | {{ {}; }}\n",
            decoded(pem),
            recipe::write_ca_bundle(dir, system)
        ));
    }
    s.push_str(&recipe::start_detached(dir, &recipe::command(l)));
    s.push('\n');
    s
}

/// The sidecar token a bootstrap script writes into its token file (tests read it back as the
/// machine would).
#[cfg(test)]
pub(crate) fn token_written_by(script: &str) -> String {
    let line = script
        .lines()
        .find(|l| l.contains("> autoscaler-sidecar/token "))
        .expect("the script writes the token file");
    let encoded = line
        .split('\'')
        .nth(3)
        .expect("the token file's contents are quoted base64");
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .unwrap();
    String::from_utf8(decoded).unwrap().trim_end().to_string()
}

impl Injector {
    /// The bootstrap script that starts the sidecar named `name` with `token` at boot; it
    /// fetches the binary from the autoscaler's [`BINARY_PATH`]. A secret: it holds the token.
    pub fn bootstrap(&self, name: &str, token: &Secret) -> Result<Secret, InjectError> {
        let dir = &self.config.remote_dir;
        let relay_ca = match &self.ca {
            Some(ca) => Some(crate::tls::relay_ca_pem(
                &ca.certificate,
                ca.ca_bundle.as_deref(),
            )?),
            None => None,
        };
        let ca_file = relay_ca.as_ref().map(|_| recipe::ca_file(dir));
        let remote_binary = self.remote_binary();
        let launch = self.launch(name, remote_binary.as_deref(), ca_file.as_deref());
        let url = self
            .binary_sha256()
            .map(|sum| format!("{}{BINARY_PATH}/{sum}", self.public_url));
        let download = match (&url, self.binary_sha256(), &remote_binary) {
            (Some(url), Some(sha256), Some(dest)) => Some(Download { url, sha256, dest }),
            _ => None,
        };
        let system_ca = self
            .ca
            .as_ref()
            .map(|c| c.system_ca_files.as_slice())
            .unwrap_or_default();
        let extras = Extras {
            ready_command: self.config.ready_command.as_deref(),
            download,
            ca: relay_ca.as_deref().map(|pem| (pem, system_ca)),
        };
        let files = recipe::files(&launch, token.expose());
        Ok(Secret::new(script(&launch, &files, &extras)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SidecarMode;

    fn launch(mode: &SidecarMode) -> Launch<'_> {
        Launch {
            mode,
            url: "http://10.0.0.1:8090",
            name: "m-7",
            concurrency: 2,
            dir: "autoscaler-sidecar",
            binary: Some("autoscaler-sidecar/bin/sidecar"),
            ca_file: None,
            job_user: None,
        }
    }

    #[test]
    fn the_script_checks_the_binary_writes_the_token_and_starts_the_sidecar_detached() {
        let mode = SidecarMode::Builtin;
        let l = launch(&mode);
        let files = recipe::files(&l, "glrt-secret");
        let extras = Extras {
            ready_command: Some("test -e /ready"),
            download: Some(Download {
                url: "http://10.0.0.1:8090/autoscaler/v1/sidecar-binary/abc",
                sha256: "abc",
                dest: "autoscaler-sidecar/bin/sidecar",
            }),
            ca: None,
        };
        let s = script(&l, &files, &extras);
        assert!(s.starts_with("#!/bin/sh\n"));
        assert!(s.contains("if ! sh -c 'test -e /ready'; then"));
        assert!(s.contains("echo 'abc  autoscaler-sidecar/bin/sidecar.part' | sha256sum -c -"));
        assert!(s.contains("'http://10.0.0.1:8090/autoscaler/v1/sidecar-binary/abc'"));
        // The token is in the script (the machine needs it) but only base64-encoded into a
        // mode-600 file, never on a command line of the sidecar.
        let encoded = base64::engine::general_purpose::STANDARD.encode("glrt-secret\n");
        assert!(s.contains(&format!(
            "printf '%s' '{encoded}' | base64 -d > autoscaler-sidecar/token && chmod 600 autoscaler-sidecar/token"
        )));
        assert!(!s.contains("glrt-secret"));
        assert!(
            s.trim_end()
                .ends_with(&recipe::start_detached(l.dir, &recipe::command(&l)))
        );
    }

    #[test]
    fn the_script_runs_as_written_in_a_shell() {
        let dir = tempfile::tempdir().unwrap();
        let mode = SidecarMode::Command {
            template: "echo started {url} {token} > {dir}/out".into(),
        };
        let mut l = launch(&mode);
        l.binary = None;
        let files = recipe::files(&l, "glrt-'odd\"token");
        let s = script(&l, &files, &Extras::default());
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(&s)
            .env("HOME", dir.path())
            .status()
            .unwrap();
        assert!(status.success());
        let out = dir.path().join("autoscaler-sidecar/out");
        let deadline = crate::clock::monotonic() + std::time::Duration::from_secs(10);
        // The sidecar runs detached: its output appears once it has run.
        while std::fs::read_to_string(&out).unwrap_or_default().is_empty() {
            assert!(
                crate::clock::monotonic() < deadline,
                "the sidecar never ran"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            "started http://10.0.0.1:8090 glrt-'odd\"token\n"
        );
    }
}
