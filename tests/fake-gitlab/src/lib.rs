//! A stand-in for GitLab's runner API (see `tests/fake-gitlab/README.md`).
