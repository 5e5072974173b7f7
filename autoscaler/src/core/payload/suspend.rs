//! `suspend_options`, taken out of the payload before any runner sees it.
//!
//! With `suspend_options` (gitlab-runner v19.0 and later, behind its feature flag
//! `FF_SUSPENDABLE_ENVIRONMENTS`), a stock runner keeps a finished job's environment on its
//! machine to resume it later, and a resumed job is accepted only by the runner manager that
//! suspended it (runner-protocol.md §3.4). A machine here is the autoscaler's to destroy once
//! idle, and each machine's runner has its own identity, so a suspended environment would be
//! lost and its resumption refused; with the shell executor a requested suspend even turns a
//! successful job into `runner_system_failure`. The autoscaler therefore removes the member and
//! the job runs as one that asked for no suspension. Every other member is kept byte for byte,
//! in its order; a payload without the member is not touched at all.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

/// The member removed.
const SUSPEND_OPTIONS: &str = "suspend_options";

/// `payload` without its top-level `suspend_options` member (borrowed as it is when it has
/// none, or when it is not a JSON object: the parse that follows reports that).
pub fn without_suspend_options(payload: &[u8]) -> Cow<'_, [u8]> {
    // Quoted, as a member's name is: most payloads are passed on without a parse.
    let needle = format!("\"{SUSPEND_OPTIONS}\"");
    if !payload
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
    {
        return Cow::Borrowed(payload);
    }
    let Ok(Members(members)) = serde_json::from_slice::<Members<'_>>(payload) else {
        return Cow::Borrowed(payload);
    };
    if members.iter().all(|(key, _)| key != SUSPEND_OPTIONS) {
        return Cow::Borrowed(payload);
    }
    let mut out = Vec::with_capacity(payload.len());
    out.push(b'{');
    let kept = members.iter().filter(|(key, _)| key != SUSPEND_OPTIONS);
    for (i, (key, value)) in kept.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        // A string always serializes.
        serde_json::to_writer(&mut out, key).expect("a JSON string");
        out.push(b':');
        out.extend_from_slice(value.get().as_bytes());
    }
    out.push(b'}');
    Cow::Owned(out)
}

/// A JSON object's members in their order, each value as its raw bytes.
struct Members<'a>(Vec<(String, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct InOrder;
        impl<'de> Visitor<'de> for InOrder {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, &'de RawValue>()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(InOrder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_member_goes_and_every_other_byte_stays_in_order() {
        let payload = br#"{"id":7,"token":"t","suspend_options":{"suspend_on_success":true,"runtime_environment_key":"k"},"variables":[{"key":"A","value":"1 2"}],"steps":[]}"#;
        let out = without_suspend_options(payload);
        assert_eq!(
            &*out,
            br#"{"id":7,"token":"t","variables":[{"key":"A","value":"1 2"}],"steps":[]}"#
        );
    }

    #[test]
    fn a_payload_without_it_is_not_touched() {
        let payload = br#"{ "id": 7, "token": "t" }"#;
        assert!(matches!(without_suspend_options(payload), Cow::Borrowed(p) if p == payload));
        // Only in a variable's value: not the member.
        let payload =
            br#"{"id":7,"token":"t","variables":[{"key":"X","value":"\"suspend_options\""}]}"#;
        assert!(matches!(without_suspend_options(payload), Cow::Borrowed(p) if p == payload));
    }

    #[test]
    fn not_an_object_is_left_for_the_parse_to_refuse() {
        let payload = br#"["suspend_options"]"#;
        assert!(matches!(without_suspend_options(payload), Cow::Borrowed(p) if p == payload));
    }
}
