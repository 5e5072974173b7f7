//! Which waiting sidecar gets a job, and which ready job a sidecar gets.
//!
//! Only a machine of the job's class may take it (pools with machine classes). Then two
//! preferences, in order: a machine that last ran a job of the same project (its caches,
//! images and git objects are warm), then the busiest machine (packing jobs onto few machines
//! lets the others go idle and be removed). Ties go to the request that waited longest, so that
//! with nothing to prefer the hand-out stays first come, first served.

/// What routing knows of a sidecar's machine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    /// The project of the last job handed to it.
    pub last_project: Option<u64>,
    /// Jobs it runs now.
    pub running: u32,
    /// Its machine class (`None`: the pool has no classes).
    pub class: Option<String>,
}

/// How well one sidecar suits one job. Compared field by field: the greatest wins.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Fit {
    /// The sidecar's machine last ran a job of this job's project.
    pub same_project: bool,
    /// Jobs its machine runs now.
    pub running: u32,
}

impl Fit {
    pub fn new(last_project: Option<u64>, job_project: Option<u64>, running: u32) -> Self {
        Self {
            same_project: job_project.is_some() && last_project == job_project,
            running,
        }
    }

    /// How `machine` suits a job of `project` and `class`; `None` when it may not take it.
    pub fn of(machine: &Placement, project: Option<u64>, class: Option<&str>) -> Option<Self> {
        (machine.class.as_deref() == class)
            .then(|| Self::new(machine.last_project, project, machine.running))
    }
}

/// The index of the best candidate that may take the job (the earliest among equals), `None`
/// when there is none.
pub fn best(candidates: &[Option<Fit>]) -> Option<usize> {
    candidates
        .iter()
        .enumerate()
        .filter_map(|(i, fit)| fit.map(|f| (i, f)))
        .fold(None, |best: Option<(usize, Fit)>, (i, fit)| match best {
            Some((_, b)) if b >= fit => best,
            _ => Some((i, fit)),
        })
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fit(same_project: bool, running: u32) -> Option<Fit> {
        Some(Fit {
            same_project,
            running,
        })
    }

    #[test]
    fn the_same_project_wins_over_a_busier_machine() {
        assert_eq!(best(&[fit(false, 3), fit(true, 0), fit(false, 1)]), Some(1));
    }

    #[test]
    fn without_affinity_the_busiest_machine_wins() {
        assert_eq!(
            best(&[fit(false, 0), fit(false, 2), fit(false, 1)]),
            Some(1)
        );
    }

    #[test]
    fn equals_go_to_the_longest_waiting() {
        assert_eq!(best(&[fit(false, 1), fit(false, 1)]), Some(0));
        assert_eq!(best(&[fit(true, 0), fit(true, 0)]), Some(0));
        assert_eq!(best(&[]), None);
    }

    #[test]
    fn only_a_machine_of_the_jobs_class_may_take_it() {
        let machine = |class: Option<&str>, running| Placement {
            last_project: None,
            running,
            class: class.map(str::to_string),
        };
        let fits: Vec<Option<Fit>> = [machine(Some("small"), 3), machine(Some("large"), 0)]
            .iter()
            .map(|m| Fit::of(m, None, Some("large")))
            .collect();
        assert_eq!(best(&fits), Some(1));
        assert_eq!(best(&[None, None]), None);
        assert!(Fit::of(&machine(None, 0), None, None).is_some());
        assert!(Fit::of(&machine(None, 0), None, Some("large")).is_none());
    }

    #[test]
    fn a_job_without_a_project_has_no_affinity() {
        assert!(!Fit::new(None, None, 0).same_project);
        assert!(!Fit::new(Some(3), None, 0).same_project);
        assert!(Fit::new(Some(3), Some(3), 0).same_project);
        assert!(!Fit::new(Some(4), Some(3), 0).same_project);
    }
}
