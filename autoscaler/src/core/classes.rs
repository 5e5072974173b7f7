//! Machine classes: kinds of machine within one pool (small and large, x86 and arm, GPU), each
//! with its sources and its job slots per machine. A job names the class it needs in a CI
//! variable; a job naming none gets the pool's default class; a job naming a class the pool does
//! not have fails at once, with a line in its log listing the classes that exist.

use serde::Deserialize;

/// The CI variable a job names its class with, unless the pool says otherwise.
pub const DEFAULT_VARIABLE: &str = "AUTOSCALER_MACHINE_CLASS";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineClass {
    pub name: String,
    /// Jobs one machine of the class runs at once.
    pub capacity_per_machine: u32,
    /// Most live machines of the class (`None`: only the pool's `max_machines`).
    pub max_machines: Option<u32>,
    /// The pool's sources that make machines of the class, in order (empty: all of them).
    pub sources: Vec<String>,
}

/// A pool's classes. The first one listed is the default unless `default` names another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classes {
    pub variable: String,
    pub default: String,
    pub list: Vec<MachineClass>,
}

impl Classes {
    pub fn get(&self, name: &str) -> Option<&MachineClass> {
        self.list.iter().find(|c| c.name == name)
    }

    pub fn names(&self) -> Vec<&str> {
        self.list.iter().map(|c| c.name.as_str()).collect()
    }

    /// The class of a job whose class variable is `asked` (`None`: not set), or why it has none.
    pub fn choose(&self, asked: Option<&str>) -> Result<String, String> {
        let asked = asked.map(str::trim).filter(|a| !a.is_empty());
        match asked {
            None => Ok(self.default.clone()),
            Some(name) if self.get(name).is_some() => Ok(name.to_string()),
            Some(name) => Err(format!(
                "the job asks for machine class {name:?} ({}), which this runner does not have; its classes are: {}",
                self.variable,
                self.names().join(", ")
            )),
        }
    }
}

#[derive(Deserialize)]
struct Variables {
    #[serde(default)]
    variables: Option<Vec<Variable>>,
}

#[derive(Deserialize)]
struct Variable {
    key: String,
    #[serde(default)]
    value: Option<String>,
}

/// The value of the job variable `key` in a job payload, if the job has it. The last one wins,
/// as in a runner's environment.
pub fn variable(payload: &[u8], key: &str) -> Option<String> {
    let parsed: Variables = serde_json::from_slice(payload).ok()?;
    parsed
        .variables?
        .into_iter()
        .rev()
        .find(|v| v.key == key)
        .and_then(|v| v.value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classes() -> Classes {
        let class = |name: &str| MachineClass {
            name: name.into(),
            capacity_per_machine: 1,
            max_machines: None,
            sources: Vec::new(),
        };
        Classes {
            variable: DEFAULT_VARIABLE.into(),
            default: "small".into(),
            list: vec![class("small"), class("large")],
        }
    }

    #[test]
    fn a_job_gets_the_class_it_names_or_the_default() {
        let c = classes();
        assert_eq!(c.choose(Some("large")), Ok("large".into()));
        assert_eq!(c.choose(None), Ok("small".into()));
        assert_eq!(c.choose(Some("  ")), Ok("small".into()));
    }

    #[test]
    fn an_unknown_class_is_refused_with_the_classes_that_exist() {
        let err = classes().choose(Some("gpu")).unwrap_err();
        assert!(err.contains("\"gpu\""), "{err}");
        assert!(err.contains("AUTOSCALER_MACHINE_CLASS"), "{err}");
        assert!(err.ends_with("small, large"), "{err}");
    }

    #[test]
    fn the_variable_is_read_from_the_payload() {
        let payload = br#"{"id": 1, "token": "t", "variables": [
            {"key": "CI_JOB_ID", "value": "1", "public": true},
            {"key": "AUTOSCALER_MACHINE_CLASS", "value": "large", "public": true}]}"#;
        assert_eq!(
            variable(payload, DEFAULT_VARIABLE).as_deref(),
            Some("large")
        );
        assert_eq!(variable(payload, "OTHER"), None);
        assert_eq!(variable(br#"{"id": 1}"#, DEFAULT_VARIABLE), None);
    }
}
