//! The unprivileged user job scripts run as (`--job-user`). A job is arbitrary code: run as the
//! sidecar's own user it could read the sidecar's token and ask for other projects' jobs. The
//! sidecar, running as root, starts every script with this user's uid and gid (and no
//! supplementary groups), and hands it the job's directory; its own files stay root's.

use std::path::{Path, PathBuf};

use nix::unistd::{Gid, Uid, User, setfsgid, setfsuid};

#[derive(Debug, thiserror::Error)]
pub enum JobUserError {
    #[error("job user {0:?} does not exist")]
    Missing(String),
    #[error("looking up job user {name:?}: {source}")]
    Lookup {
        name: String,
        #[source]
        source: nix::Error,
    },
    #[error("job user {0:?} is root: jobs must not run with the sidecar's privileges")]
    Root(String),
    #[error("running jobs as {0:?} needs the sidecar to run as root")]
    NotRoot(String),
    #[error("handing {path} to the job user: {source}")]
    HandOver {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobUser {
    pub name: String,
    pub uid: Uid,
    pub gid: Gid,
    pub home: PathBuf,
}

impl JobUser {
    /// The user called `name`, when this process may switch to it.
    pub fn lookup(name: &str) -> Result<Self, JobUserError> {
        let user = User::from_name(name)
            .map_err(|source| JobUserError::Lookup {
                name: name.to_string(),
                source,
            })?
            .ok_or_else(|| JobUserError::Missing(name.to_string()))?;
        if user.uid.is_root() {
            return Err(JobUserError::Root(name.to_string()));
        }
        if !Uid::effective().is_root() {
            return Err(JobUserError::NotRoot(name.to_string()));
        }
        Ok(Self {
            name: user.name,
            uid: user.uid,
            gid: user.gid,
            home: user.dir,
        })
    }

    /// Makes `command` run as this user, with its home and names in the environment. (std drops
    /// the supplementary groups too when root switches uid.)
    pub fn apply(&self, command: &mut tokio::process::Command) {
        command
            .uid(self.uid.as_raw())
            .gid(self.gid.as_raw())
            .env("HOME", &self.home)
            .env("USER", &self.name)
            .env("LOGNAME", &self.name);
    }

    /// Gives `root` and everything under it to this user (symbolic links themselves, never
    /// what they point to), so that the job can write where it runs.
    pub fn hand_over(&self, root: &Path) -> Result<(), JobUserError> {
        let failed = |path: &Path, source| JobUserError::HandOver {
            path: path.to_path_buf(),
            source,
        };
        let mut pending = vec![root.to_path_buf()];
        while let Some(path) = pending.pop() {
            std::os::unix::fs::lchown(&path, Some(self.uid.as_raw()), Some(self.gid.as_raw()))
                .map_err(|e| failed(&path, e))?;
            let meta = std::fs::symlink_metadata(&path).map_err(|e| failed(&path, e))?;
            if meta.is_dir() {
                for entry in std::fs::read_dir(&path).map_err(|e| failed(&path, e))? {
                    pending.push(entry.map_err(|e| failed(&path, e))?.path());
                }
            }
        }
        Ok(())
    }

    /// Runs `f` with this thread's filesystem identity switched to this user, so that the
    /// sidecar (root) reads and writes job files only as the job could: a symbolic link the job
    /// planted towards the sidecar's token, or towards a system file, then fails like it would
    /// for the job. Linux keeps the filesystem identity per thread; run `f` on a blocking
    /// thread of its own (`spawn_blocking`), never across an `await`.
    pub fn with_fs_identity<T>(&self, f: impl FnOnce() -> T) -> T {
        struct Restore(Uid, Gid);
        impl Drop for Restore {
            fn drop(&mut self) {
                setfsuid(self.0);
                setfsgid(self.1);
            }
        }
        let old_gid = setfsgid(self.gid);
        let old_uid = setfsuid(self.uid);
        let _restore = Restore(old_uid, old_gid);
        f()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As root: a link a job planted towards a root-only file leads nowhere while the sidecar
    /// works with the job user's filesystem identity. As anyone else: `--job-user` is refused.
    #[test]
    fn with_the_job_users_identity_a_planted_link_to_a_root_file_cannot_be_read() {
        if !Uid::effective().is_root() {
            assert!(matches!(
                JobUser::lookup("nobody"),
                Err(JobUserError::NotRoot(_) | JobUserError::Missing(_))
            ));
            return;
        }
        let user = JobUser::lookup("nobody").unwrap();
        let secret_dir = tempfile::tempdir().unwrap();
        let secret = secret_dir.path().join("token");
        std::fs::write(&secret, "glrt-secret").unwrap();
        let private = |p: &Path, mode| {
            std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(mode))
                .unwrap();
        };
        // The sidecar's token as the injection leaves it: mode 600 in a directory of mode 700.
        private(&secret, 0o600);
        private(secret_dir.path(), 0o700);
        let job_dir = tempfile::tempdir().unwrap();
        let link = job_dir.path().join("artifact.txt");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        user.hand_over(job_dir.path()).unwrap();
        assert_eq!(std::fs::read_to_string(&link).unwrap(), "glrt-secret");
        let as_job = user.with_fs_identity(|| std::fs::read_to_string(&link));
        assert_eq!(
            as_job.unwrap_err().kind(),
            std::io::ErrorKind::PermissionDenied
        );
        // The thread's own identity is back afterwards.
        assert_eq!(std::fs::read_to_string(&link).unwrap(), "glrt-secret");
        let owner = std::os::unix::fs::MetadataExt::uid(
            &std::fs::symlink_metadata(job_dir.path()).unwrap(),
        );
        assert_eq!(owner, user.uid.as_raw());
        assert!(matches!(
            JobUser::lookup("root"),
            Err(JobUserError::Root(_))
        ));
    }
}
