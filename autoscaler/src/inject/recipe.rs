//! What runs on a machine, as text: the command that starts each kind of sidecar and the
//! `config.toml` a stock `gitlab-runner` needs. Pure, so that the exact command lines are tested
//! without a machine.

use crate::config::SidecarMode;

/// Everything a recipe needs to know about one machine's sidecar.
#[derive(Debug, Clone)]
pub struct Launch<'a> {
    pub mode: &'a SidecarMode,
    /// The autoscaler's URL as the sidecar must use it.
    pub url: &'a str,
    pub name: &'a str,
    pub concurrency: u32,
    /// The sidecar's directory on the machine (relative to the login user's home).
    pub dir: &'a str,
    /// The uploaded binary on the machine, if one was uploaded.
    pub binary: Option<&'a str>,
    /// The CA bundle written on the machine when the autoscaler serves TLS.
    pub ca_file: Option<&'a str>,
    /// The user the built-in sidecar runs jobs as (`None`: its own user).
    pub job_user: Option<&'a str>,
}

/// Where the CA bundle goes on the machine, inside the sidecar's directory.
pub fn ca_file(dir: &str) -> String {
    format!("{dir}/ca.crt")
}

/// Writes the CA bundle at [`ca_file`]: the relay's CA certificates from stdin, then the
/// machine's own system CA certificates (the first of `system_files` that exists and is not
/// empty), so that the sidecar trusts the relay and its clones from GitLab still verify. Prints
/// the system file used, or `none`.
pub fn write_ca_bundle(dir: &str, system_files: &[String]) -> String {
    let candidates: Vec<String> = system_files.iter().map(|f| quote(f)).collect();
    let dest = ca_file(dir);
    format!(
        "sys=none; for f in {list}; do if [ -s \"$f\" ]; then sys=$f; break; fi; done; \
         umask 022 && {{ cat; if [ \"$sys\" != none ]; then cat \"$sys\"; fi; }} > {dest}.tmp && mv -f {dest}.tmp {dest} && echo \"$sys\"",
        list = candidates.join(" "),
    )
}

/// Quotes a value for a POSIX shell.
pub fn quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

/// The files written next to the sidecar before it starts: `(name, mode, contents)`. The token
/// travels in these files (mode 600), never on a command line.
pub fn files(l: &Launch<'_>, token: &str) -> Vec<(&'static str, u32, String)> {
    let mut files = vec![("token", 0o600, format!("{token}\n"))];
    if let SidecarMode::GitlabRunner {
        executor,
        extra_config,
    } = l.mode
    {
        files.push((
            "config.toml",
            0o600,
            gitlab_runner_config(l, token, executor, extra_config),
        ));
    }
    files
}

/// `config.toml` for `gitlab-runner run`: one runner entry, the autoscaler as its URL, the
/// machine's own token, and as many job slots as the machine's capacity.
pub fn gitlab_runner_config(l: &Launch<'_>, token: &str, executor: &str, extra: &str) -> String {
    let toml_str = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
    let mut out = format!(
        "# Written by the autoscaler for machine {name}.\n\
         concurrent = {n}\n\
         check_interval = 3\n\
         shutdown_timeout = 30\n\
         \n\
         [[runners]]\n\
         \x20 name = {name_q}\n\
         \x20 url = {url}\n\
         \x20 token = {token}\n\
         \x20 executor = {executor}\n\
         \x20 limit = {n}\n\
         \x20 request_concurrency = 1\n\
         \x20 builds_dir = {builds}\n\
         \x20 cache_dir = {cache}\n{tls}",
        name = l.name,
        n = l.concurrency,
        name_q = toml_str(l.name),
        url = toml_str(l.url),
        token = toml_str(token),
        executor = toml_str(executor),
        builds = toml_str(&format!("{}/builds", l.dir)),
        cache = toml_str(&format!("{}/cache", l.dir)),
        tls = l.ca_file.map_or_else(String::new, |f| format!(
            "  tls-ca-file = {}\n",
            toml_str(f)
        )),
    );
    for line in extra.lines().filter(|l| !l.trim().is_empty()) {
        out.push_str("  ");
        out.push_str(line.trim());
        out.push('\n');
    }
    out
}

/// The command that runs the sidecar in the foreground (the caller detaches it). It reads the
/// token from the `token` file written beside it.
pub fn command(l: &Launch<'_>) -> String {
    let dir = l.dir;
    match l.mode {
        SidecarMode::Builtin => match l.job_user {
            None => format!(
                "SIDECAR_TOKEN=\"$(cat {dir}/token)\" exec {bin} run --url {url} --concurrent {n} --builds-dir {dir}/builds \
                 --name {name} --system-id-file {dir}/.runner_system_id{tls}",
                bin = l.binary.map_or_else(|| "sidecar".to_string(), quote),
                url = quote(l.url),
                n = l.concurrency,
                name = quote(l.name),
                tls = tls_arg(l),
            ),
            // Switching to the job user needs root: a login user that is not root starts the
            // sidecar through `sudo -n`, the token passed in the environment, never in argv.
            Some(user) => format!(
                "SIDECAR_TOKEN=\"$(cat {dir}/token)\"; export SIDECAR_TOKEN; \
                 if [ \"$(id -u)\" = 0 ]; then as_root=; else as_root='sudo -n --preserve-env=SIDECAR_TOKEN'; fi; \
                 exec $as_root {bin} run --url {url} --concurrent {n} --job-user {user} \
                 --name {name} --system-id-file {dir}/.runner_system_id{tls}",
                bin = l.binary.map_or_else(|| "sidecar".to_string(), quote),
                url = quote(l.url),
                n = l.concurrency,
                user = quote(user),
                name = quote(l.name),
                tls = tls_arg(l),
            ),
        },
        SidecarMode::GitlabRunner { .. } => format!(
            "exec {bin} run --config {dir}/config.toml --working-directory {dir}",
            bin = l.binary.map_or_else(|| "gitlab-runner".to_string(), quote),
        ),
        SidecarMode::Command { template } => {
            let filled = template
                .replace("{url}", &quote(l.url))
                .replace("{token}", "\"$(cat __DIR__/token)\"")
                .replace("{concurrency}", &l.concurrency.to_string())
                .replace("{name}", &quote(l.name))
                .replace("{binary}", &l.binary.map_or_else(String::new, quote))
                .replace("{ca_file}", &l.ca_file.map_or_else(String::new, quote))
                .replace("{dir}", "__DIR__");
            format!("exec {}", filled.replace("__DIR__", dir))
        }
    }
}

fn tls_arg(l: &Launch<'_>) -> String {
    l.ca_file
        .map_or_else(String::new, |f| format!(" --tls-ca-file {}", quote(f)))
}

/// Creates the job user when the machine lacks it (`useradd`, or busybox `adduser`; through
/// `sudo -n` when the login user is not root). Another injection creating it at the same time
/// is fine: only a user still missing afterwards fails.
pub fn ensure_job_user(user: &str) -> String {
    let u = quote(user);
    format!(
        "id -u {u} >/dev/null 2>&1 && exit 0; \
         if [ \"$(id -u)\" = 0 ]; then as_root=; else as_root='sudo -n'; fi; \
         out=$($as_root useradd --system --create-home --shell /bin/sh {u} 2>&1 || $as_root adduser -S -D -s /bin/sh {u} 2>&1); \
         id -u {u} >/dev/null 2>&1 || {{ echo \"cannot create the job user {user}: $out\"; exit 1; }}"
    )
}

/// Starts `command` detached from the SSH session (its own session, output to `sidecar.log`)
/// and prints its pid. Paths stay relative to the login directory, as in the command.
pub fn start_detached(dir: &str, command: &str) -> String {
    format!(
        "nohup setsid sh -c {cmd} > {dir}/sidecar.log 2>&1 < /dev/null & echo $! > {dir}/sidecar.pid && cat {dir}/sidecar.pid",
        cmd = quote(command),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(mode: &SidecarMode) -> Launch<'_> {
        Launch {
            mode,
            url: "http://10.0.0.1:8090",
            name: "linux-7",
            concurrency: 3,
            dir: "autoscaler-sidecar",
            binary: Some("autoscaler-sidecar/bin/sidecar"),
            ca_file: None,
            job_user: None,
        }
    }

    #[test]
    fn with_tls_both_sidecars_are_pointed_at_the_ca_bundle() {
        let ca = ca_file("autoscaler-sidecar");
        let mut l = launch(&SidecarMode::Builtin);
        l.ca_file = Some(&ca);
        assert!(command(&l).ends_with(" --tls-ca-file 'autoscaler-sidecar/ca.crt'"));
        let config = gitlab_runner_config(&l, "glrt-abc", "shell", "");
        let parsed: toml::Value = toml::from_str(&config).unwrap();
        assert_eq!(
            parsed["runners"][0]["tls-ca-file"].as_str(),
            Some("autoscaler-sidecar/ca.crt")
        );
    }

    #[test]
    fn the_ca_bundle_adds_the_first_system_file_found() {
        let files = ["/etc/a b.crt".to_string(), "/etc/c.crt".to_string()];
        let script = write_ca_bundle("d", &files);
        assert!(script.starts_with("sys=none; for f in '/etc/a b.crt' '/etc/c.crt'; do"));
        assert!(script.contains("> d/ca.crt.tmp && mv -f d/ca.crt.tmp d/ca.crt"));
    }

    #[test]
    fn builtin_runs_the_sidecar_with_the_token_from_its_file() {
        let c = command(&launch(&SidecarMode::Builtin));
        assert_eq!(
            c,
            "SIDECAR_TOKEN=\"$(cat autoscaler-sidecar/token)\" exec 'autoscaler-sidecar/bin/sidecar' run --url 'http://10.0.0.1:8090' \
             --concurrent 3 --builds-dir autoscaler-sidecar/builds --name 'linux-7' --system-id-file autoscaler-sidecar/.runner_system_id"
        );
    }

    #[test]
    fn with_a_job_user_builtin_runs_as_root_and_passes_the_user_but_never_the_token_in_argv() {
        let mut l = launch(&SidecarMode::Builtin);
        l.job_user = Some("autoscaler-job");
        let c = command(&l);
        assert!(c.contains(
            " run --url 'http://10.0.0.1:8090' --concurrent 3 --job-user 'autoscaler-job' "
        ));
        assert!(c.contains("sudo -n --preserve-env=SIDECAR_TOKEN"));
        assert!(
            !c.contains("--builds-dir"),
            "builds go to the job user's home"
        );
        let ensure = ensure_job_user("autoscaler-job");
        assert!(ensure.starts_with("id -u 'autoscaler-job' >/dev/null 2>&1 && exit 0;"));
    }

    #[test]
    fn gitlab_runner_gets_an_explicit_url_and_its_own_token_in_config_toml() {
        let mode = SidecarMode::GitlabRunner {
            executor: "docker".into(),
            extra_config: "[runners.docker]\nimage = \"alpine:3\"\n".into(),
        };
        let l = launch(&mode);
        assert_eq!(
            command(&l),
            "exec 'autoscaler-sidecar/bin/sidecar' run --config autoscaler-sidecar/config.toml --working-directory autoscaler-sidecar"
        );
        let config = gitlab_runner_config(
            &l,
            "glrt-abc",
            "docker",
            "[runners.docker]\nimage = \"alpine:3\"\n",
        );
        let parsed: toml::Value = toml::from_str(&config).unwrap();
        assert_eq!(parsed["concurrent"].as_integer(), Some(3));
        let runner = &parsed["runners"][0];
        assert_eq!(runner["url"].as_str(), Some("http://10.0.0.1:8090"));
        assert_eq!(runner["token"].as_str(), Some("glrt-abc"));
        assert_eq!(runner["executor"].as_str(), Some("docker"));
        assert_eq!(runner["limit"].as_integer(), Some(3));
        assert_eq!(runner["docker"]["image"].as_str(), Some("alpine:3"));
        let files = files(&l, "glrt-abc");
        assert!(
            files
                .iter()
                .any(|(n, mode, _)| *n == "config.toml" && *mode == 0o600)
        );
    }

    #[test]
    fn command_templates_are_filled_and_quoted() {
        let mode = SidecarMode::Command {
            template: "{binary} {url} {token} {concurrency} --name {name} --dir {dir}".into(),
        };
        assert_eq!(
            command(&launch(&mode)),
            "exec 'autoscaler-sidecar/bin/sidecar' 'http://10.0.0.1:8090' \"$(cat autoscaler-sidecar/token)\" 3 --name 'linux-7' --dir autoscaler-sidecar"
        );
    }

    #[test]
    fn quoting_survives_quotes() {
        assert_eq!(quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn detached_start_records_the_pid() {
        let s = start_detached("d", "exec x");
        assert!(s.starts_with("nohup setsid sh -c 'exec x' > d/sidecar.log 2>&1 < /dev/null &"));
        assert!(s.ends_with("cat d/sidecar.pid"));
    }
}
