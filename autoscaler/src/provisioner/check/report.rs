//! The kit's report: each clause of `api-spec/provisioner.md` with its number, name and
//! outcome, printed as the `autoscaler provisioner check` command shows it.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    Failed(String),
    Skipped(String),
}

#[derive(Debug, Clone)]
pub struct Clause {
    pub number: u8,
    pub name: &'static str,
    pub outcome: Outcome,
}

#[derive(Debug, Clone)]
pub struct Report {
    pub provisioner: String,
    pub clauses: Vec<Clause>,
}

impl Report {
    /// No clause failed. A clause is skipped either because one before it failed (so the
    /// report fails anyway) or because it checks an optional verb the provisioner does not
    /// declare (`stop_start`), which is no failure.
    pub fn passed(&self) -> bool {
        self.failed().is_empty()
    }

    pub fn failed(&self) -> Vec<&Clause> {
        self.clauses
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Failed(_)))
            .collect()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Provisioner: {}", self.provisioner)?;
        for c in &self.clauses {
            match &c.outcome {
                Outcome::Passed => writeln!(f, "  ok    {:>2}  {}", c.number, c.name)?,
                Outcome::Failed(why) => writeln!(
                    f,
                    "  FAIL  {:>2}  {}\n              {why}",
                    c.number, c.name
                )?,
                Outcome::Skipped(why) => {
                    writeln!(f, "  skip  {:>2}  {} ({why})", c.number, c.name)?
                }
            }
        }
        let count = |p: fn(&Outcome) -> bool| self.clauses.iter().filter(|c| p(&c.outcome)).count();
        write!(
            f,
            "{} clauses: {} passed, {} failed, {} skipped",
            self.clauses.len(),
            count(|o| *o == Outcome::Passed),
            count(|o| matches!(o, Outcome::Failed(_))),
            count(|o| matches!(o, Outcome::Skipped(_)))
        )
    }
}
